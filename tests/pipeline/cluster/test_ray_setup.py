"""--backend ray and its settings: a missing Ray, or no cluster at the address, is one line
before anything starts."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from config import ConfigError
from configuration.resolution import resolve_config
from pipeline.cluster.ray_setup import host_and_port

ROOT = Path(__file__).resolve().parents[3]
# main.py as a user runs it, on a machine where `import ray` fails.
WITHOUT_RAY = (
    "import runpy, sys; sys.modules['ray'] = None; sys.argv = ['main.py', *sys.argv[1:]]; "
    "runpy.run_path('main.py', run_name='__main__')"
)


@pytest.mark.parametrize(
    "args",
    [["--backend", "ray", "--preset", "tiny"], ["--preset", "tiny", "--set", "backend=ray", "--total-frames", "10"]],
)
def test_backend_ray_without_ray_is_one_line_naming_the_install_and_exit_2(args, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_RAY, *args, "--run-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("main.py: error:"), result.stderr
    assert 'pip install -e ".[ray]"' in lines[0]
    assert not list(tmp_path.iterdir())  # nothing started: no run directory


def test_backend_is_local_by_default_and_checked():
    resolved = resolve_config({}, preset="tiny", knobs={})
    assert resolved.config.backend == "local" and resolved.config.ray_address == ""
    with pytest.raises(ConfigError, match="backend='cluster'"):
        resolve_config({"backend": "cluster"}, preset="tiny", knobs={})
    with pytest.raises(ConfigError, match="ray_nodes=-1"):
        resolve_config({"ray_nodes": -1}, preset="tiny", knobs={})
    knobbed = resolve_config({}, preset="tiny", knobs={"backend": "ray"})
    assert knobbed.config.backend == "ray" and knobbed.sources["backend"] == "config.py knob"


def free_port() -> int:
    """A port nothing listens on (bound, read and closed again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_ray_address_where_nothing_listens_fails_in_one_line_and_leaves_no_run_directory(tmp_path):
    """Ray itself would retry for many minutes; the run checks the address first. The
    timeout is a safety net: the failure takes the time to import Ray and torch."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'); CI installs it")
    address = f"127.0.0.1:{free_port()}"
    result = subprocess.run(
        [sys.executable, "main.py", "--preset", "tiny", "--backend", "ray", "--ray-address", address]
        + ["--run-dir", str(tmp_path), "--monitor", "log"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("main.py: error:"), result.stderr
    assert f"no Ray cluster answered at {address}" in lines[0] and "ray start --head" in lines[0]
    assert not list(tmp_path.iterdir())  # no run directory


JOIN = """
import sys
from pipeline.cluster import ray_setup
from pipeline.common.errors import UserError
try:
    ray_setup.connect(sys.argv[1], join_timeout_s=3)
except UserError as exc:
    print(exc)
    sys.exit(2)
"""


def test_an_address_that_listens_but_is_not_ray_is_given_up_after_the_join_timeout():
    """A port that accepts connections and never answers (the handshake completes in the
    kernel's backlog): ray.init would wait many minutes, the join gives up after its bound."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'); CI installs it")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        result = subprocess.run(
            [sys.executable, "-c", JOIN, address], cwd=ROOT, capture_output=True, text=True, timeout=170
        )
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"no Ray cluster answered at {address}: something listens there" in result.stdout, result.stdout


def test_addresses_are_parsed_for_the_connect_check():
    assert host_and_port("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert host_and_port("ray://head.example:10001") == ("head.example", 10001)
    assert host_and_port("[::1]:6379") == ("::1", 6379)
    assert host_and_port("auto") is None and host_and_port("head") is None and host_and_port("head:x") is None

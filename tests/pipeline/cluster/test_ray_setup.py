"""--backend ray and its settings: a missing Ray is one line, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from config import ConfigError, resolve_config

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

"""Importing envs and using Mario envs prints nothing, and no old ``gym`` is loaded.

These run fresh interpreters: in the test process the emulator packages may already be
imported, so only a new process shows what a user would see.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess[str]:
    # -W default shows warnings that the default filters would hide outside __main__.
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_import_envs_is_silent_and_does_not_load_the_emulator() -> None:
    result = _run("import sys, envs\nassert 'gym' not in sys.modules and 'nes_py' not in sys.modules")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == ""


def test_making_and_stepping_envs_is_silent() -> None:
    code = """
import envs
for env_id in ("SuperMarioBros-1-1-v0", "Catch-v0"):
    env = envs.make_env(env_id, seed=0, no_progress_steps=5, max_episode_steps=50)
    env.reset()
    for _ in range(20):
        _, _, terminated, truncated, _ = env.step(1)
        if terminated or truncated:
            env.reset()
    env.close()
assert envs.num_actions("SuperMarioBros-v0", "complex") == 12
import sys
assert "gym" not in sys.modules  # the unmaintained gym package, not gymnasium
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == ""

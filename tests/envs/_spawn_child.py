"""Child-process target for test_make_env's spawn test (importable by plain name)."""

from __future__ import annotations

import hashlib


def step_and_checksum(env_id: str, seed: int, steps: int) -> str:
    """Build the env in this (spawned) process, step it, and hash every observation."""
    import envs

    env = envs.make_env(env_id, seed=seed)
    obs, _ = env.reset()
    digest = hashlib.sha256(obs.tobytes())
    for step in range(steps):
        obs, _, terminated, truncated, _ = env.step(step % env.action_space.n)
        digest.update(obs.tobytes())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return digest.hexdigest()

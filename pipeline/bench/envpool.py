"""Env worker processes: bare or wrapped environments stepping random actions on request.

The baseline every collector figure is divided by. Each worker is a spawned process,
isolated like a real collector, that builds one env (the bare :class:`envs.mario.MarioEnv`
or the :func:`envs.make_env` stack) and then steps it for as long as it is asked.
:class:`EnvPool` holds a set of them; idle workers block on their pipe and use no CPU,
so a pool can stay up while other parts are measured.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from pipeline.common.child import Child, ChildError, ChildExited, ChildTimeout
from pipeline.common.seeds import stream_seed

WORKER_START_TIMEOUT_S = 180.0  # spawning, importing and booting an emulator on a busy box
ANSWER_ALLOWANCE_S = 120.0  # beyond the seconds asked for: a loaded box may deschedule a worker


def _env_worker(conn: Connection, kind: str, env_id: str, env_kwargs: dict[str, Any], seed: int) -> None:
    """Spawn target (through :class:`~pipeline.common.child.Child`): build one env, then step it when asked.

    Replies once when the env is built and warm. Then, per message: ``(seconds,
    start_at)`` -> run random actions from ``start_at`` (a ``time.monotonic`` value,
    shared by all processes on Linux) for ``seconds`` and reply with the counts;
    ``None`` -> exit.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    import numpy as np

    built = time.perf_counter()
    step, reset, frames_per_step, num_actions = _build_stepper(kind, env_id, env_kwargs, seed)
    rng = np.random.default_rng(seed)
    actions = rng.integers(num_actions, size=4096)
    _run_env(step, reset, frames_per_step, actions, 0.5)  # warm caches, leave the start screen
    conn.send({"ready": True, "build_s": time.perf_counter() - built})
    while True:
        message = conn.recv()
        if message is None:
            return
        seconds, start_at = message
        delay = start_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        conn.send(_run_env(step, reset, frames_per_step, actions, seconds))


def _build_stepper(
    kind: str, env_id: str, env_kwargs: dict[str, Any], seed: int
) -> tuple[Callable[[int], bool], Callable[..., Any], int, int]:
    """``(step, reset, frames_per_step, num_actions)`` of the env ``kind`` (raw or wrapped)."""
    from envs import make_env

    if kind == "raw":
        from envs.actions import action_bytes
        from envs.mario import MarioEnv

        env = MarioEnv(env_id)
        table = action_bytes(env_kwargs["action_set"])
        env.reset(seed=seed)

        def step(action: int) -> bool:
            _, _, terminated, truncated, _ = env.step(table[action])
            return terminated or truncated

        return step, env.reset, 1, len(table)
    env = make_env(env_id, seed=seed, **env_kwargs)
    env.reset(seed=seed)
    frames_per_step = 1 if env_id.startswith("Catch") else int(env_kwargs["frame_skip"])

    def step(action: int) -> bool:
        _, _, terminated, truncated, _ = env.step(action)
        return terminated or truncated

    return step, env.reset, frames_per_step, int(env.action_space.n)


def _run_env(
    step: Callable[[int], bool], reset: Callable[..., Any], frames_per_step: int, actions: Any, seconds: float
) -> dict[str, float]:
    n = len(actions)
    steps = episodes = 0
    cpu0 = time.process_time()
    start = time.perf_counter()
    end = start + seconds
    now = start
    while now < end:
        for _ in range(16):  # check the clock every 16 steps
            if step(int(actions[steps % n])):
                reset()
                episodes += 1
            steps += 1
        now = time.perf_counter()
    elapsed = now - start
    return {
        "steps": steps,
        "frames": steps * frames_per_step,
        "episodes": episodes,
        "elapsed_s": elapsed,
        "cpu_s": time.process_time() - cpu0,
    }


class EnvPool:
    """Spawned env processes (isolated like real collectors) that step on request.

    Idle workers block in ``recv`` and use no CPU, so a pool can stay up while other
    parts are measured.
    """

    def __init__(self, kinds: Sequence[str], env_id: str, env_kwargs: dict[str, Any], seed: int = 0) -> None:
        self.kinds = list(kinds)
        self.workers: list[Child] = []
        try:
            # Start them all, then wait: they boot their emulators in parallel.
            for i, kind in enumerate(self.kinds):
                args = (kind, env_id, env_kwargs, stream_seed(seed, i))
                self.workers.append(Child(_env_worker, args, name=f"bench-{kind}-{i}"))
            for i, worker in enumerate(self.workers):
                what = f"env worker {i} ({self.kinds[i]})"
                try:
                    worker.receive(WORKER_START_TIMEOUT_S)
                except ChildTimeout:
                    raise RuntimeError(f"{what} did not start in {WORKER_START_TIMEOUT_S:.0f} s") from None
                except ChildError as exc:
                    raise RuntimeError(f"{what} failed:\n{exc.traceback}") from None
                except ChildExited as exc:
                    raise RuntimeError(f"{what} exited with code {exc.exitcode} before it was ready") from None
        except BaseException:
            self.close()
            raise

    def run(self, indices: Sequence[int], seconds: float) -> list[dict[str, float]]:
        """Step workers ``indices`` at the same time for ``seconds``; their counts."""
        start_at = time.monotonic() + 0.1  # every worker starts at this instant, not as it is told
        for i in indices:
            self.workers[i].send((seconds, start_at))
        results = []
        for i in indices:
            try:
                results.append(self.workers[i].receive(seconds + ANSWER_ALLOWANCE_S))
            except ChildTimeout:
                raise RuntimeError(f"env worker {i} did not answer") from None
        return results

    def frames_per_s(self, indices: Sequence[int], seconds: float) -> tuple[float, float]:
        """Total frames/s and agent steps/s of ``indices`` stepping at once."""
        results = self.run(indices, seconds)
        return (sum(r["frames"] / r["elapsed_s"] for r in results), sum(r["steps"] / r["elapsed_s"] for r in results))

    def close(self) -> None:
        """Ask every worker to exit, then join each (killing any that does not end in 5 s)."""
        for worker in self.workers:  # all at once, so they wind down in parallel
            try:
                worker.send(None)
            except (OSError, ValueError):
                pass  # already gone
        for worker in self.workers:
            worker.close(5.0)
        self.workers = []

"""The evaluator's process: it plays the evaluation protocol on the published weights.

:func:`evaluator_main` is the process target that :class:`~pipeline.run.evaluator.evaluator.Evaluator`
starts (niced, ignoring SIGINT); its worker loads each new version of the weights from the
weights block, evaluates at every multiple of the interval in training frames, keeps the
best episode's video, and sends each result back on a queue. The parent-side handle and
the whole protocol are described in :mod:`pipeline.run.evaluator.evaluator`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config import Config
from pipeline.common.child import ParentWatch
from pipeline.common.files import atomic_write
from pipeline.learning.episode_loop import run_episode
from pipeline.run.evaluator.hold import hold_frames
from pipeline.run.evaluator.progress import CountingEnv
from pipeline.run.evaluator.protocol import EVAL_SEED_OFFSET, EvaluationProtocol, play_protocol, protocol_figures
from pipeline.run.pacing import next_mark

SLEEP_S = 0.1  # how often an idle evaluator checks its stop conditions
MAX_CONSECUTIVE_FAILURES = 5


@dataclass
class EvaluatorArgs:
    """Everything the evaluator process needs; plain values so it pickles for the child's start."""

    config: Config
    run_path: str
    weights_name: str
    parent_pid: int
    interval_frames: int
    episodes: int
    max_steps: int
    epsilon: float = 0.0
    start_frames: int = 0
    max_lag_frames: int = 0


# ---------------------------------------------------------------------- the process


def _make_logger(run_path: Path) -> logging.Logger:
    logger = logging.getLogger("mario.evaluator")
    logger.propagate = False
    if not logger.handlers:
        try:
            (run_path / "logs").mkdir(parents=True, exist_ok=True)
            handler: logging.Handler = logging.FileHandler(run_path / "logs" / "evaluator.log")
        except OSError:
            handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return logger


def evaluator_main(args: EvaluatorArgs, results: Any, stop_event: Any, final_event: Any, progress: Any = None) -> None:
    """Process entry point (the target of the evaluator's Process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's business
    try:
        os.nice(10)
    except OSError:
        pass
    logger = _make_logger(Path(args.run_path))
    worker = None
    final_done = False
    try:
        worker = _Worker(args, results, stop_event, final_event, logger, progress)
        final_done = worker.run()
    except Exception:
        logger.error("evaluator failed:\n%s", traceback.format_exc())
        raise
    finally:
        if worker is not None:
            worker.close()
        if final_done:
            # The learner is waiting for the final result and reading the queue: let the
            # queue's feeder thread write it into the pipe before the process exits.
            results.close()
            results.join_thread()
        else:
            # Stopped from outside: never let an unread result keep the process from exiting.
            results.cancel_join_thread()


class _Worker:
    def __init__(
        self,
        args: EvaluatorArgs,
        results: Any,
        stop_event: Any,
        final_event: Any,
        logger: logging.Logger,
        progress: Any = None,
    ) -> None:
        self.parent = ParentWatch(args.parent_pid)  # the learner: stop once it is gone
        import torch

        import envs
        from pipeline.learning.episode_loop import build_env
        from pipeline.learning.flat_state import StateLoader
        from pipeline.learning.policy import network_of
        from pipeline.transport.segments import attach_segment
        from pipeline.transport.weights import WeightsBlock

        torch.set_num_threads(1)
        self.args = args
        self.results = results
        self.stop_event = stop_event
        self.final_event = final_event
        self.logger = logger
        self.cfg = args.config
        self.videos = Path(args.run_path) / "videos"
        self.segment = attach_segment(args.weights_name)
        self.weights = WeightsBlock(self.segment.buf)
        self.num_actions = envs.num_actions(self.cfg.env_id, self.cfg.action_set)
        self.frame_stack = self.cfg.frame_stack
        self.model = network_of(self.cfg, self.num_actions).eval()
        self.model.requires_grad_(False)
        self.loader = StateLoader(self.model)
        if self.loader.num_floats != self.weights.num_floats:
            raise RuntimeError(
                f"weights block holds {self.weights.num_floats} floats, the evaluator's network "
                f"needs {self.loader.num_floats}"
            )
        # Every step of an evaluation is counted into progress (when there is one).
        self.progress = progress
        self._build_env = build_env if progress is None else lambda *a, **k: CountingEnv(build_env(*a, **k), progress)
        self.seed0 = self.cfg.seed + EVAL_SEED_OFFSET
        self.protocol = EvaluationProtocol(
            episodes=args.episodes, epsilon=args.epsilon, first_seed=self.seed0, max_steps=args.max_steps
        )
        self.env = self._build_env(self.cfg, seed=self.seed0)
        self.best_return = self._load_best()

    def _load_best(self) -> float:
        try:
            return float(json.loads((self.videos / "best.json").read_text())["return"])
        except (OSError, ValueError, KeyError, TypeError):
            return float("-inf")

    def should_stop(self) -> bool:
        # Once a final evaluation is asked for, the weights block's stop flag is the
        # collectors' signal only: the learner ends the wait with stop_event.
        stop_flag = self.weights.stop_requested and not self.final_event.is_set()
        return self.stop_event.is_set() or stop_flag or self.parent.gone()

    def run(self) -> bool:
        """Evaluate until stopped; returns True when it ended after a final evaluation."""
        evaluated = 0
        # The first evaluation waits for the first multiple of the interval too: at a run's
        # start the weights are random (a resumed run waits for the next multiple).
        due = next_mark(self.args.start_frames, self.args.interval_frames)
        self._hold_after(self.args.start_frames)
        failures = 0
        self.logger.info(
            "evaluator started (pid %d): every %d frames, %s, at most %d steps each",
            os.getpid(),
            self.args.interval_frames,
            self.protocol.describe(),
            self.args.max_steps,
        )
        while not self.should_stop():
            final = self.final_event.is_set()
            version, frames = self.weights.version, self.weights.frames
            if final and version in (0, evaluated):
                self.logger.info("evaluator stopping after the final evaluation")
                return True  # the last weights are evaluated (or there are none)
            if not final and (frames < due or version in (0, evaluated)):
                time.sleep(SLEEP_S)
                continue
            # Due again at the next multiple, whether this evaluation succeeds or not (a
            # failure is retried then, not in a loop).
            due = next_mark(frames, self.args.interval_frames)
            if not final:
                self._hold_after(frames)  # started: training may go on until the next one is overdue
            try:
                version = self.evaluate(final=final)
            except Exception:
                failures += 1
                self.logger.error("evaluation failed (%d in a row):\n%s", failures, traceback.format_exc())
                if failures >= MAX_CONSECUTIVE_FAILURES or final:
                    raise
                self._rebuild_env()
                continue
            failures = 0
            if version:
                evaluated = version
        self.logger.info("evaluator stopping")
        return False

    def _hold_after(self, frames: int) -> None:
        """With ``max_lag_frames``: hold training once the evaluation due after ``frames`` is that overdue."""
        self.weights.hold_frames = hold_frames(frames, self.args.interval_frames, self.args.max_lag_frames)

    def _rebuild_env(self) -> None:
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - it is being replaced because it broke
            pass
        self.env = self._build_env(self.cfg, seed=self.seed0)

    def evaluate(self, *, final: bool = False) -> int:
        """One evaluation of the current weights; returns their version (0 if interrupted).

        ``final``: the run's last weights (the result says so)."""
        if isinstance(self.env, CountingEnv):
            self.env.begin()
        try:
            return self._evaluate(final=final)
        finally:
            if isinstance(self.env, CountingEnv):
                self.env.end()

    def _evaluate(self, *, final: bool) -> int:
        t0, cpu0 = time.monotonic(), time.process_time()
        version = self.weights.read(self.loader.staging)
        self.loader.load()
        learner_step, frames = self.weights.learner_step, self.weights.frames
        episodes = play_protocol(
            self.env,
            self.model,
            self.protocol,
            frame_stack=self.frame_stack,
            num_actions=self.num_actions,
            should_stop=self.should_stop,
        )
        if episodes is None:
            return 0
        greedy = episodes[0]
        if self.protocol.epsilon > 0:  # the greedy episode beside them (at 0 they are greedy already)
            greedy = run_episode(
                self.env,
                self.model,
                frame_stack=self.frame_stack,
                num_actions=self.num_actions,
                seed=self.seed0,
                max_steps=self.protocol.max_steps,
                should_stop=self.should_stop,
            )
            if self.should_stop():
                return 0
        figures = protocol_figures(episodes)
        best = max(episodes, key=lambda e: e.ret)
        video = None
        new_best = best.ret > self.best_return
        if new_best:
            video = self._save_best(best, version, learner_step)
            self.best_return = best.ret
        result = {
            "weights_version": version,
            "learner_step": learner_step,
            "frames": frames,
            **figures,
            "greedy_x_pos": greedy.x_pos,
            "greedy_flag": greedy.flag_get,
            "greedy_return": greedy.ret,
            "epsilon": self.protocol.epsilon,
            "best_return": self.best_return,
            "new_best": new_best,
            "video": video,
            "final": final,
            "eval_s": time.monotonic() - t0,
            "cpu_s": time.process_time() - cpu0,
            "time": time.time(),
        }
        self.results.put(result)
        self.logger.info(
            "%sweights v%d (frames %d, update %d): return %.1f, x_pos mean %.0f median %.0f greedy %d, "
            "flag rate %.2f%s",
            "final evaluation, " if final else "",
            version,
            frames,
            learner_step,
            result["mean_return"],
            result["mean_x_pos"],
            result["median_x_pos"],
            result["greedy_x_pos"],
            result["flag_rate"],
            f"; new best {best.ret:.1f} -> {video}" if new_best else "",
        )
        return version

    def _save_best(self, episode: Any, version: int, learner_step: int) -> str:
        """Replay ``episode`` from its seed and actions into videos/best.mp4 (atomically)."""
        from pipeline.learning.episode_loop import caption, play_episode
        from pipeline.learning.recording import annotate, open_video, video_fps

        self.videos.mkdir(parents=True, exist_ok=True)
        writer = open_video(self.videos / "best.mp4", video_fps(self.cfg.env_id, self.cfg.frame_skip), threads=1)
        replayed = None
        try:
            for step in play_episode(
                self.env,
                self.model,
                frame_stack=self.frame_stack,
                num_actions=self.num_actions,
                seed=episode.seed,
                actions=episode.actions,
                record=True,
            ):
                writer.append(annotate(step.frame, caption(step, f"v{version}")))
                replayed = step.result
            path = writer.close()
        except BaseException:
            writer.abort()
            raise
        if replayed is None or replayed.ret != episode.ret or replayed.length != episode.length:
            self.logger.warning(
                "best episode did not replay identically (return %.1f vs %.1f); the video shows the replay",
                replayed.ret if replayed else float("nan"),
                episode.ret,
            )
        info = {
            **episode.to_dict(),
            "epsilon": self.protocol.epsilon,
            "weights_version": version,
            "learner_step": learner_step,
            "video": path.name,
            "time": time.time(),
        }
        with atomic_write(self.videos / "best.json", "w") as handle:
            handle.write(json.dumps(info, indent=2) + "\n")
        return str(path)

    def close(self) -> None:
        from pipeline.transport.segments import release

        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - closing on the way out
            pass
        if self.args.max_lag_frames > 0:
            self.weights.hold_frames = 0  # no evaluator, no waiting for one
        self.weights.close()
        release(self.segment, unlink=False)

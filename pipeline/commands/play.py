"""``python main.py play``: watch a checkpoint play, as a colour video.

    python main.py play [--checkpoint PATH|NAME] [--env ID] [--episodes N] [--out FILE.mp4|FILE.gif]
                        [--epsilon E] [--seed N] [--max-steps N]

Without ``--checkpoint`` it plays the shipped network (``models/trained/<env id>.pt``,
written by ``python main.py export``); ``--checkpoint`` takes what ``eval``'s does.

The video has exactly one frame per agent step: the emulator's last raw colour frame of
that step at full resolution (240x256 RGB for Mario; Catch's 84x84 frames are upscaled
3x), with a caption along the bottom (episode, step, return so far, x position,
world-stage). It plays in real time: 60 / frame_skip frames per second (15 for the
default frame skip of 4). Episodes follow one another in the same file.

Without ``--out`` the video goes to the checkpoint's run directory,
``<run>/videos/play-<frames>.mp4``; a shipped network's to ``runs/videos/play-<name>.mp4``
(the repository's tree stays clean). MP4 (H.264, yuv420p) needs imageio-ffmpeg; without
it a GIF is written instead. Episodes and seeds work as in :mod:`pipeline.commands.evaluate`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.commands.evaluate import add_policy_arguments
from pipeline.common.errors import OneLineParser

__all__ = ["build_parser", "default_video", "play_command"]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="main.py play", description="Write a video of a checkpoint (default: the shipped network) playing."
    )
    add_policy_arguments(parser, episodes=1)
    parser.add_argument("--out", help="video file, .mp4 or .gif (default: <run>/videos/play-<frames>.mp4)")
    return parser


def default_video(checkpoint: Path, frames: int) -> Path:
    """Where a video goes without ``--out``: beside the checkpoint's run, or for a shipped
    network under the default run directory (``runs/``, which git ignores)."""
    from config import Config
    from pipeline.learning.policy import run_dir_of
    from pipeline.learning.shipped import shipped_dir

    if checkpoint.resolve().parent == shipped_dir().resolve():
        return Path(Config().run_dir) / "videos" / f"play-{checkpoint.stem}.mp4"
    return run_dir_of(checkpoint) / "videos" / f"play-{frames}.mp4"


def play_command(argv: list[str]) -> int:
    """Play ``--episodes`` episodes and write them to one video; print its path and a summary."""
    from pipeline.common.files import check_output_path
    from pipeline.learning.episode_loop import build_env, caption, play_episode, single_thread_torch, summarise
    from pipeline.learning.policy import load_policy
    from pipeline.learning.recording import VIDEO_SUFFIXES, annotate, open_video, video_fps
    from pipeline.run.evaluator.protocol import epsilon_rng

    args = build_parser().parse_args(argv)
    if args.out:  # fail on a bad path before loading anything
        out = check_output_path(args.out, VIDEO_SUFFIXES, "video")
    policy = load_policy(args.checkpoint, args.env_id)
    if not args.out:
        out = check_output_path(default_video(policy.path, policy.frames), VIDEO_SUFFIXES, "video")
    if policy.provenance:  # an export: say what is playing
        record = policy.provenance
        figures = record.get("figures") or {}
        measured = (
            f"; measured x_pos {figures['mean_x_pos']:.0f}, flag rate {figures['flag_rate']:.2f} "
            f"over {figures['episodes']} episodes at epsilon {figures['epsilon']:g}"
            if figures
            else ""
        )
        print(f"playing {policy.path}: trained for {policy.frames} frames{measured}")
    env = build_env(policy.config, policy.env_id, seed=args.seed)
    results = []
    writer = open_video(out, video_fps(policy.env_id, policy.config.frame_skip))
    try:
        with single_thread_torch():
            for episode in range(args.episodes):
                for step in play_episode(
                    env,
                    policy.model,
                    frame_stack=policy.frame_stack,
                    num_actions=policy.num_actions,
                    seed=args.seed + episode,
                    epsilon=args.epsilon,
                    rng=epsilon_rng(args.seed + episode),  # the protocol's: eval's episodes, frame for frame
                    max_steps=args.max_steps,
                    record=True,
                ):
                    writer.append(annotate(step.frame, caption(step, f"ep {episode + 1}")))
                    if step.result is not None:
                        results.append(step.result)
                        r = step.result
                        stage = f", stage {r.world}-{r.stage}" if r.world else ""
                        print(
                            f"episode {episode + 1}: return {r.ret:.1f}, x_pos {r.x_pos}, "
                            f"flag {'yes' if r.flag_get else 'no'}, {r.length} steps{stage}"
                        )
        path = writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        env.close()
    summary = summarise(results)
    height, width = writer.size or (0, 0)
    print(
        f"wrote {path} ({writer.frames} frames of {height}x{width} RGB, {writer.fps:g} fps, one frame per agent step)"
    )
    print(
        f"{policy.path.name} on {policy.env_id}: {summary['episodes']} episode(s), mean return "
        f"{summary['mean_return']:.1f}, mean x_pos {summary['mean_x_pos']:.1f}, "
        f"flag rate {summary['flag_rate']:.2f}"
    )
    sys.stdout.flush()
    return 0

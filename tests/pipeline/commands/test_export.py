"""``main.py export``: from a real training run's checkpoint and mark, the file holds their
acting copy exactly (or rounded to the storage type), round-trips, and ``play``/``eval``
act with it as with the source; and one clear error per mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from config import Config
from pipeline.commands.evaluate import eval_command
from pipeline.commands.export import FIGURE_KEYS, export_command
from pipeline.commands.play import default_video, play_command
from pipeline.common.errors import UserError
from pipeline.learning.checkpoint import load_checkpoint
from pipeline.learning.episode_loop import build_env, play_episode
from pipeline.learning.policy import load_policy
from pipeline.learning.shipped import shipped_dir
from tests.conftest import run_main
from tests.pipeline.commands.test_evaluate import make_checkpoint, one_torch_thread  # noqa: F401 (autouse)

ROOT = Path(__file__).resolve().parents[3]
TRAIN = ["--preset", "tiny", "--total-frames", "1000", "--monitor", "off", "--set", "mark_interval_frames=500"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A real (tiny) training run on Catch: its final checkpoint and its marks, with the
    averaged acting copy calibrated at every publish (the default)."""
    runs = tmp_path_factory.mktemp("runs")
    result = run_main([*TRAIN, "--run-dir", str(runs), "--run-name", "catch"], cwd=ROOT, timeout_s=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return runs / "catch"


def final_checkpoint(run: Path) -> Path:
    return max((run / "checkpoints").glob("ckpt-*.pt"), key=lambda p: int(p.stem.split("-")[1]))


def actions_of(checkpoint: Path | str, episodes: int = 3) -> list[list[int]]:
    """The actions the loader's network takes in greedy episodes of seeds 0.. (as play and eval play them)."""
    policy = load_policy(checkpoint)
    env = build_env(policy.config, policy.env_id)
    played = []
    for seed in range(episodes):
        steps = play_episode(
            env, policy.model, frame_stack=policy.frame_stack, num_actions=policy.num_actions, seed=seed
        )
        played.append([step.action for step in steps])
    env.close()
    return played


def greedy_states(policy, seeds: int) -> list[torch.Tensor]:
    """The observations (frame stacks) of ``policy``'s greedy episodes of seeds 0.."""
    env = build_env(policy.config, policy.env_id)
    states = []
    for seed in range(seeds):
        obs, _ = env.reset(seed=seed)
        stack = torch.from_numpy(obs)[None].repeat(policy.frame_stack, 1, 1)
        while True:
            states.append(stack.clone())
            with torch.inference_mode():
                action = int(policy.model(stack[None]).argmax(1))
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
            stack = torch.cat([stack[1:], torch.from_numpy(obs)[None]])
    env.close()
    return states


@pytest.mark.slow
def test_export_of_a_real_checkpoint_is_its_acting_copy_and_plays_as_it_does(tiny_run, tmp_path, capsys):
    source = final_checkpoint(tiny_run)
    out = tmp_path / "catch.pt"
    trained_with = "python main.py " + " ".join(TRAIN)
    argv = ["--checkpoint", str(tiny_run), "--out", str(out), "--dtype", "float32", "--trained-with", trained_with]
    assert export_command(argv) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "averaged acting copy" in printed
    assert "the same greedy action on 64" in printed  # float32 is exact

    original, exported = load_checkpoint(source), load_checkpoint(out)
    acting = original["learner"]["acting"]
    assert acting is not None and original["learner"]["calibrated_at"] == original["learner"]["updates"]
    assert set(exported["learner"]["acting"]) == set(acting)
    for key, value in acting.items():
        assert torch.equal(exported["learner"]["acting"][key], value), key
    online = original["learner"]["online"]  # the averaged copy is not the online net
    assert not torch.equal(exported["learner"]["acting"]["features.0.weight"], online["features.0.weight"])
    assert Config.from_dict(exported["config"]) == Config.from_dict(original["config"])
    assert exported["num_actions"] == original["num_actions"]
    record = exported["provenance"]
    assert record["trained_with"] == trained_with and record["frames"] == original["counters"]["frames"]
    assert record["updates"] == original["learner"]["updates"] and record["seed"] == original["config"]["seed"]
    assert record["source"] == f"catch/checkpoints/{source.name}" and record["dtype"] == "float32"
    assert out.stat().st_size < source.stat().st_size / 4  # no target, optimizer, online net or RNG

    # The one loader takes both; the same greedy actions follow, and the same figures in eval and play.
    assert actions_of(out) == actions_of(source)
    figures = {}
    for name, path in (("source", source), ("export", out)):
        argv = ["--checkpoint", str(path), "--episodes", "3", "--epsilon", "0.2", "--seed", "4"]
        assert eval_command([*argv, "--json", str(tmp_path / f"{name}.json")]) == 0
        figures[name] = json.loads((tmp_path / f"{name}.json").read_text())
        assert play_command([*argv, "--out", str(tmp_path / f"{name}.gif")]) == 0
        figures[name]["play"] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("episode")]
    assert figures["export"]["per_episode"] == figures["source"]["per_episode"]
    assert figures["export"]["play"] == figures["source"]["play"] and len(figures["source"]["play"]) == 3


@pytest.mark.slow
def test_a_half_precision_export_of_a_mark_rounds_its_weights_only(tiny_run, tmp_path):
    mark = max((tiny_run / "checkpoints" / "marks").glob("frames-*.pt"))
    eval_json = tmp_path / "eval.json"
    assert eval_command(["--checkpoint", str(mark), "--episodes", "2", "--json", str(eval_json)]) == 0
    out = tmp_path / "half.pt"
    argv = ["--checkpoint", str(mark), "--out", str(out), "--figures", str(eval_json), "--dtype", "float16"]
    assert export_command(argv) == 0
    original, exported = load_checkpoint(mark)["learner"]["acting"], load_checkpoint(out)["learner"]["acting"]
    for key, value in original.items():
        stored = exported[key]
        if value.is_floating_point():  # rounded to nearest
            assert stored.dtype == torch.float16 and torch.equal(stored, value.half()), key
        else:
            assert torch.equal(stored, value), key
    record = load_checkpoint(out)["provenance"]
    figures = json.loads(eval_json.read_text())
    assert record["figures"]["mean_x_pos"] == figures["mean_x_pos"] and record["figures"]["episodes"] == 2
    assert record["dtype"] == "float16" and record["frames"] == load_checkpoint(mark)["counters"]["frames"]
    full = tmp_path / "full.pt"  # float32 by default
    assert export_command(["--checkpoint", str(mark), "--out", str(full)]) == 0
    assert load_checkpoint(full)["provenance"]["dtype"] == "float32"
    assert out.stat().st_size < 0.55 * full.stat().st_size

    # Acting with the rounded weights: every value within a small distance of the source's,
    # so a greedy action can change only where the source's gap is smaller than that.
    source, half = load_policy(mark), load_policy(out)
    batch = torch.stack(greedy_states(source, seeds=3))
    with torch.inference_mode():
        q_source, q_half = source.model(batch), half.model(batch)
    drift = float((q_source - q_half).abs().max())
    assert drift < 0.01 * float(q_source.abs().max()) + 1e-4
    top2 = q_source.topk(2, dim=1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * drift
    assert torch.equal(q_source.argmax(1)[clear], q_half.argmax(1)[clear])


@pytest.mark.slow
def test_exporting_an_export_keeps_its_record_and_weights(tiny_run, tmp_path):
    first, second = tmp_path / "first.pt", tmp_path / "second.pt"
    argv = ["--checkpoint", str(tiny_run), "--dtype", "float32", "--trained-with", "python main.py --preset tiny"]
    assert export_command([*argv, "--out", str(first)]) == 0
    assert export_command(["--checkpoint", str(first), "--out", str(second), "--dtype", "float32"]) == 0
    a, b = load_checkpoint(first), load_checkpoint(second)
    assert all(torch.equal(b["learner"]["acting"][k], v) for k, v in a["learner"]["acting"].items())
    assert b["provenance"]["trained_with"] == "python main.py --preset tiny"
    assert b["provenance"]["source"] == a["provenance"]["source"]


# ------------------------------------------------------------------------------ without a run


def test_the_default_output_is_the_shipped_file_of_the_checkpoints_env(tmp_path, monkeypatch, capsys):
    from pipeline.learning import shipped

    monkeypatch.setattr(shipped, "shipped_dir", lambda: tmp_path / "trained")
    ckpt, state = make_checkpoint(tmp_path / "run" / "checkpoints" / "ckpt-000000001000.pt")
    assert export_command(["--checkpoint", str(ckpt)]) == 0
    out = tmp_path / "trained" / "Catch-v0.pt"
    assert f"wrote {out}" in capsys.readouterr().out
    exported = load_checkpoint(out)
    # A checkpoint without an acting copy exports its online network.
    assert exported["provenance"]["weights"] == "online network"
    weights = exported["learner"]["acting"]  # float32 by default: exactly the source's
    assert all(torch.equal(weights[k], v) and weights[k].dtype == v.dtype for k, v in state.items())
    assert load_policy("Catch-v0").path == out


def test_a_shipped_networks_video_goes_under_runs_not_into_the_repository(tmp_path):
    shipped = shipped_dir() / "SuperMarioBros-1-1-v0.pt"
    assert default_video(shipped, 5) == Path("runs/videos/play-SuperMarioBros-1-1-v0.mp4")
    run_ckpt = tmp_path / "run" / "checkpoints" / "ckpt-5.pt"
    assert default_video(run_ckpt, 5) == tmp_path / "run" / "videos" / "play-5.mp4"


def test_figures_of_another_checkpoint_are_refused(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-1000.pt", frames=1000)
    other = tmp_path / "eval.json"
    other.write_text(json.dumps(dict.fromkeys(FIGURE_KEYS, 0) | {"frames": 2000}))
    with pytest.raises(UserError, match="evaluated weights of 2000 frames, the checkpoint has 1000"):
        export_command(["--checkpoint", str(ckpt), "--out", str(tmp_path / "x.pt"), "--figures", str(other)])
    other.write_text("{}")
    with pytest.raises(UserError, match="not a python main.py eval --json file"):
        export_command(["--checkpoint", str(ckpt), "--out", str(tmp_path / "x.pt"), "--figures", str(other)])
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "the following arguments are required: --checkpoint"),
        (["--checkpoint", "nope.pt"], "does not exist"),
        (["--checkpoint", "CKPT", "--out", "x.txt"], "unsupported extension '.txt'"),
        (["--checkpoint", "CKPT", "--dtype", "int8"], "invalid choice: 'int8'"),
        (["--checkpoint", "CKPT", "--out", "CKPT"], "is the checkpoint being exported"),
    ],
)
def test_mistakes_are_one_clear_error(tmp_path, argv, fragment):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-1.pt")
    argv = [str(ckpt) if a == "CKPT" else a for a in argv]
    with pytest.raises(UserError, match=fragment.replace("(", r"\(").replace(".", r"\.")) as info:
        export_command(argv)
    assert "\n" not in str(info.value)

"""The learning benchmark: curve arithmetic, the spread between seeds and the noise
statement, the evaluation protocol applied to real marks in real processes (reproducible,
cached by protocol), a report written to an --out folder outside the work tree, and the
bench's help. A real (tiny) run trained, continued and evaluated through ``python main.py
bench --only learning`` is test_learning_runs.py's; one stopped, test_learning_stop.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from config import Config
from pipeline.bench import learning as learning_module
from pipeline.bench.command import _without_only_learning
from pipeline.bench.learning import (
    drawn_variants,
    learning_command,
    other_variants,
    parse,
    results_name,
    run_env,
)
from pipeline.bench.learning_curves import (
    BENCH_FIRST_SEED,
    EVAL_CACHE,
    MarkResult,
    area_under_curve,
    bench_protocol,
    cache_key,
    evaluate_mark,
    evaluate_marks,
    first_frames,
    x_pos_at,
)
from pipeline.bench.learning_figures import (
    AUC,
    BEYOND,
    NO_SPREAD,
    NOISE,
    SAME,
    compare,
    comparison_lines,
    judge,
    over_seeds,
    run_figures,
)
from pipeline.bench.learning_runs import EXIT_INTERRUPTED
from pipeline.bench.options import PART_HELP, PARTS
from pipeline.common.errors import UserError
from pipeline.learning.checkpoint import save_checkpoint
from pipeline.learning.policy import network_of
from pipeline.run.evaluator.protocol import EvaluationProtocol

ROOT = Path(__file__).resolve().parents[3]
CATCH = Config(env_id="Catch-v0")
LEFT, RIGHT = 1, 2  # Catch's actions: the paddle's column (x_pos) ends near 0 or near 9


def mark(frames: int, x: float, flag: float = 0.0) -> MarkResult:
    return MarkResult(
        frames=frames, run_frames=frames + 7, mean_x_pos=x, max_x_pos=int(x), flag_rate=flag, mean_return=0
    )


def test_frames_to_goals_and_area() -> None:
    curve = [mark(100, 400), mark(200, 1900), mark(300, 1500), mark(400, 3161, flag=1.0)]
    assert first_frames(curve, x_pos=1800) == 200  # the first time, not the last
    assert first_frames(curve, flag=True) == 400
    assert first_frames(curve[:3], flag=True) is None
    assert first_frames([mark(100, 10, flag=0.05)], flag=True) == 100  # one flag in 20 episodes counts
    # Trapezoids: (1150 + 1700 + 2330.5) * 100 / 300.
    assert area_under_curve(curve) == pytest.approx((1150 + 1700 + 2330.5) / 3)
    assert area_under_curve(curve[:1]) is None
    assert x_pos_at(curve, 300) == 1500 and x_pos_at(curve, 350) is None


def test_only_learning_is_routed_and_training_flags_pass_through() -> None:
    assert _without_only_learning(["--only", "learning", "--frames", "9"]) == ["--frames", "9"]
    assert _without_only_learning(["--only=learning"]) == []
    assert _without_only_learning(["--only", "training"]) is None
    assert _without_only_learning(["--only", "raw", "--", "--only", "learning"]) is None
    args, train_args = parse(["--seeds", "3,4", "--", "--preset", "tiny", "--set", "gamma=0.9"])
    assert args.seed_list == [3, 4] and train_args == ["--preset", "tiny", "--set", "gamma=0.9"]
    with pytest.raises(UserError, match="--seed after --"):
        parse(["--", "--seed", "1"])
    with pytest.raises(UserError, match="comma-separated integers"):
        parse(["--seeds", "a,b"])
    with pytest.raises(UserError, match="--epsilon 2.0: must be in"):
        parse(["--epsilon", "2"])
    with pytest.raises(UserError, match="given twice"):
        parse(["--seeds", "1,1"])
    with pytest.raises(UserError, match=r"--sticky 1.0: must be in \[0, 1\)"):
        parse(["--sticky", "1"])
    sticky, _ = parse(["--sticky", "0.25", "--epsilon", "0"])
    assert sticky.protocol == EvaluationProtocol(
        episodes=20, epsilon=0.0, first_seed=BENCH_FIRST_SEED, max_steps=2000, sticky=0.25
    )
    assert results_name("x", sticky.protocol) == "x-eps0x20-sticky0.25.json"


def test_the_fields_protocol_is_the_default_and_out_is_absolute(tmp_path: Path, monkeypatch) -> None:
    args, _ = parse([])
    assert args.protocol == EvaluationProtocol(episodes=20, epsilon=0.05, first_seed=BENCH_FIRST_SEED, max_steps=2000)
    assert args.out == Path("runs/learning").resolve()
    assert results_name("x", args.protocol) == "x.json"
    assert results_name("x", bench_protocol(5, 0.0)) == "x-eps0x5.json"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert parse(["--out", "elsewhere"])[0].out == tmp_path / "elsewhere"
    assert parse(["--out", "~/mario-learning"])[0].out == tmp_path / "home" / "mario-learning"
    assert parse(["--compare", "a, b"])[0].compare_names == ["a", "b"]


def test_bench_help_lists_every_part_including_learning() -> None:
    shown = subprocess.run(
        [sys.executable, "main.py", "bench", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    parts = lines[next(i for i, line in enumerate(lines) if line.startswith("parts (")) + 1 :]
    assert [line.split()[0] for line in parts] == [*PARTS, "learning"]  # one line each, nothing else
    for part, line in zip((*PARTS, "learning"), parts, strict=True):
        assert line.endswith(PART_HELP[part])
    with pytest.raises(UserError, match="learning runs alone"):
        from pipeline.bench.options import parse_options

        parse_options(["--only", "raw,learning"])


# ---------------------------------------------------------------------- spread and noise


def run_with(seed: int, **figures: float | None) -> dict:
    return {"seed": seed, "figures": figures}


def test_judge_says_noise_when_the_difference_is_within_the_spread() -> None:
    assert judge([700, 900], [750, 800]) == {"difference": 25, "spread": 200, "verdict": NOISE}
    assert judge([1000, 1100], [500, 600])["verdict"] == BEYOND
    assert judge([700], [800]) == {"difference": -100, "spread": None, "verdict": NO_SPREAD}
    assert judge([5, 5], [5, 5])["verdict"] == SAME
    assert judge([760], [750, 850])["verdict"] == NOISE  # one variant's seeds give the spread


def test_variants_are_compared_on_their_common_seeds_with_mean_and_spread() -> None:
    key = "mean_x_pos@500000"
    a = {"name": "a", "seeds": [run_with(0, **{key: 700.0}), run_with(1, **{key: 900.0}), run_with(2, **{key: 5.0})]}
    b = {"name": "b", "seeds": [run_with(0, **{key: 790.0}), run_with(1, **{key: 850.0})]}
    spread = over_seeds(a["seeds"])[key]
    assert spread == {"mean": 535.0, "min": 5.0, "max": 900.0, "seeds": 3}
    comparison = compare(a, b)
    assert comparison["seeds"] == [0, 1]  # seed 2 has no counterpart
    (row,) = comparison["figures"]  # the figures neither variant has are left out
    assert row["a"] == 800 and row["b"] == 820 and row["spread"] == 200 and row["verdict"] == NOISE
    (head, line) = comparison_lines(comparison)
    assert head == "a vs b on seeds 0,1 (means over seeds):"
    assert line == "  x_pos mean @0.5M: 800 vs 820 (difference -20, spread between seeds 200): " + NOISE
    far = {"name": "c", "seeds": [run_with(0, **{key: 2000.0}), run_with(1, **{key: 2100.0})]}
    assert compare(far, b)["figures"][0]["verdict"] == BEYOND
    partial = {"name": "d", "seeds": [run_with(0, **{key: 700.0}), run_with(1, **{key: None})]}
    assert "not on every seed (d 1 of 2, b 2)" in compare(partial, b)["figures"][0]["verdict"]
    assert "not compared" in compare(a, {"name": "e", "seeds": [run_with(9, **{key: 1.0})]})["note"]


def test_the_area_under_the_curve_is_compared_over_the_frames_both_runs_cover() -> None:
    def run_of(seed: int, xs: list[float]) -> dict:
        curve = [mark(100_000 * (i + 1), x) for i, x in enumerate(xs)]
        return {"seed": seed, "figures": run_figures(curve, {}), "curve": [asdict(r) for r in curve]}

    # The long run is level with the short one to 300k frames, then far ahead: over the
    # frames both cover the two areas are equal, while each run's own area differs.
    long = {"name": "long", "seeds": [run_of(0, [500, 700, 900, 3000, 3000]), run_of(1, [500, 700, 900, 3000])]}
    short = {"name": "short", "seeds": [run_of(0, [500, 700, 900]), run_of(1, [500, 700, 900, 100])]}
    assert long["seeds"][0]["figures"][AUC] != short["seeds"][0]["figures"][AUC]
    (row,) = [row for row in compare(long, short)["figures"] if row["figure"] == AUC]
    assert row["label"] == "area under x_pos (mean) to 0.3M"
    assert row["a"] == row["b"] == pytest.approx(700) and row["verdict"] == SAME
    assert area_under_curve([mark(100, 400), mark(200, 600), mark(300, 9000)], until=250) == pytest.approx(500)
    # Runs without curves (older results) keep their own areas.
    bare = {"name": "bare", "seeds": [run_with(0, **{AUC: 800.0})]}
    assert [row["a"] for row in compare(bare, bare)["figures"] if row["figure"] == AUC] == [800.0]


# ---------------------------------------------------------------------- marks of real networks


def save_mark(run: Path, frames: int, *, seed: int = 0, lean: int | None = None) -> Path:
    """A mark as a run writes it: a Catch network (leaning to one action if asked)."""
    torch.manual_seed(seed)
    net = network_of(CATCH, 3)
    if lean is not None:  # the advantage head's bias alone picks the action
        with torch.no_grad():
            net.advantage.weight.zero_()
            # A bias per action and quantile, action-major: every quantile of one action leans.
            net.advantage.bias.copy_(torch.eye(3)[lean].repeat_interleave(max(net.quantiles, 1)) * 5)
    payload = {
        "learner": {"online": net.state_dict()},
        "counters": {"frames": frames + 7},
        "config": CATCH.to_dict(),
        "num_actions": 3,
    }
    path = run / "checkpoints" / "marks" / f"frames-{frames:09d}.pt"
    save_checkpoint(path, payload)
    return path


def fake_run(run: Path, marks: dict[int, int | None], seed: int = 0) -> Path:
    """A finished run's directory: config, metrics and marks (frames -> the action it leans to)."""
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"config": CATCH.to_dict()}))
    (run / "metrics.csv").write_text("time_s,frames,samples,records\n60,600000,2000000,600000\n")
    for frames, lean in marks.items():
        save_mark(run, frames, seed=seed, lean=lean)
    return run


def test_marks_are_evaluated_reproducibly_and_cached_by_protocol(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "v-s0", {500_000: None, 1_000_000: None})
    protocol = bench_protocol(episodes=4, epsilon=0.3, max_steps=60)
    # An entry of the one-greedy-episode cache is not mistaken for this protocol's.
    stale = {"frames": 500_000, "run_frames": 1, "mean_x_pos": -1, "max_x_pos": -1, "flag_rate": 0, "mean_return": 0}
    (run / EVAL_CACHE).write_text(json.dumps({"episodes=1,max_steps=2000": {"frames-000500000.pt": stale}}))
    curve = evaluate_marks(run, protocol, workers=2)  # two spawned processes
    assert [r.frames for r in curve] == [500_000, 1_000_000] and curve[0].mean_x_pos >= 0
    # The values come with the same episodes (value_check plays them).
    assert all(r.q_over_return is not None and r.median_action_gap is not None for r in curve)
    cache = json.loads((run / EVAL_CACHE).read_text())
    assert sorted(cache) == sorted([cache_key(protocol), "episodes=1,max_steps=2000"])
    assert "seeds=5000000..5000003" in cache_key(protocol) and "epsilon=0.3" in cache_key(protocol)
    assert cache_key(bench_protocol(episodes=4, epsilon=0.3, max_steps=60)) == cache_key(protocol)
    assert cache_key(bench_protocol(episodes=5, epsilon=0.3, max_steps=60)) != cache_key(protocol)
    # The same mark and seeds, evaluated again here: the same figures.
    for result, path in zip(curve, sorted((run / "checkpoints" / "marks").iterdir()), strict=True):
        assert MarkResult.from_dict(evaluate_mark(str(path), protocol.to_dict())) == result
    # Evaluated marks are read back, not played again.
    written = (run / EVAL_CACHE).stat().st_mtime_ns
    assert evaluate_marks(run, protocol) == curve and (run / EVAL_CACHE).stat().st_mtime_ns == written


def test_each_mark_is_kept_as_it_finishes_so_a_failure_loses_only_the_rest(tmp_path: Path) -> None:
    """One process plays the marks in frame order: the first is cached before the third (a
    file that is no checkpoint) fails, and the next call reads it back, not played again."""
    run = fake_run(tmp_path / "v-s0", {500_000: None, 1_000_000: None})
    broken = run / "checkpoints" / "marks" / "frames-001500000.pt"
    broken.write_bytes(b"not a checkpoint")
    protocol = bench_protocol(episodes=2, epsilon=0.3, max_steps=30)
    with pytest.raises(Exception, match="frames-001500000"):
        evaluate_marks(run, protocol, workers=1)
    cache = json.loads((run / EVAL_CACHE).read_text())
    assert "frames-000500000.pt" in cache[cache_key(protocol)]  # kept before the failure
    # Marked, to tell a read-back from a replay (which would give the real figure again).
    cache[cache_key(protocol)]["frames-000500000.pt"]["mean_x_pos"] = -5.0
    (run / EVAL_CACHE).write_text(json.dumps(cache))
    broken.unlink()
    curve = evaluate_marks(run, protocol, workers=1)
    assert [r.frames for r in curve] == [500_000, 1_000_000] and curve[0].mean_x_pos == -5.0


def test_a_ctrl_c_while_marks_are_evaluated_says_what_is_kept_and_exits_130(tmp_path: Path, monkeypatch, capsys):
    fake_run(tmp_path / "v-s0", {500_000: None})

    def interrupted(run: Path, protocol) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(learning_module, "evaluate_marks", interrupted)
    argv = ["--out", str(tmp_path), "--name", "v", "--seeds", "0", "--frames", "500000", "--no-train"]
    assert learning_command(argv) == EXIT_INTERRUPTED == 130
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"learning bench: stopped while evaluating the marks of {tmp_path / 'v-s0'}")
    assert EVAL_CACHE in line and "the same command goes on with the rest" in line
    assert not (tmp_path / "v.json").exists()  # no report of half a run


@pytest.mark.slow
def test_a_report_in_an_out_folder_elsewhere_compares_variants_on_the_same_seeds(tmp_path: Path, monkeypatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    out = elsewhere / "learning"
    # a: seed 0 leans left, seed 1 right; b the other way round. Same means, a wide spread.
    for name, leans in (("a", (LEFT, RIGHT)), ("b", (RIGHT, LEFT))):
        for seed, lean in enumerate(leans):
            fake_run(out / f"{name}-s{seed}", {500_000: lean})
    flags = ["--no-train", "--out", "learning", "--seeds", "0,1", "--episodes", "3", "--epsilon", "0.2"]
    monkeypatch.chdir(elsewhere)
    assert learning_command(["--name", "a", *flags]) == 0
    # b from the command line, in another directory than the repository's: --out is relative to it.
    shown = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), "bench", "--only", "learning", "--name", "b", *flags],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    result = json.loads((out / "b-eps0.2x3.json").read_text())
    assert [Path(run["run"]).parent for run in result["seeds"]] == [out, out]
    assert (out / "learning.png").stat().st_size > 10_000
    a_curves = [s["curve"] for s in json.loads((out / "a-eps0.2x3.json").read_text())["seeds"]]
    assert [s["curve"] for s in result["seeds"]] == a_curves[::-1]  # same weights, same seeds, same figures
    lean_left, lean_right = (run["figures"]["mean_x_pos@500000"] for run in result["seeds"][::-1])
    assert lean_left < lean_right
    over = result["over_seeds"]["mean_x_pos@500000"]
    assert (over["min"], over["max"]) == (lean_left, lean_right)
    (comparison,) = result["comparisons"]
    assert comparison["against"] == "a" and comparison["seeds"] == [0, 1]
    printed = shown.stdout.splitlines()
    assert "b vs a on seeds 0,1 (means over seeds):" in printed
    (line,) = [line for line in printed if line.startswith("  x_pos mean @0.5M:")]
    assert line.endswith(NOISE) and "difference +0" in line
    assert any(line.startswith("  x_pos median @0.5M") for line in printed)
    assert any("over seeds: mean (min..max)" in line for line in printed)


def test_variants_on_another_stage_are_neither_compared_nor_drawn(tmp_path: Path) -> None:
    """x_pos and the flag are each stage's own: a 1-2 run beside 1-1 runs is not their variant."""
    protocol = bench_protocol(episodes=3, epsilon=0.2, max_steps=60).to_dict()
    fake_run(tmp_path / "catch-s0", {})
    stage_run = tmp_path / "old12-s0"
    stage_run.mkdir()
    (stage_run / "config.json").write_text(json.dumps({"config": Config(env_id="SuperMarioBros-1-2-v0").to_dict()}))
    world = Config(env_id="SuperMarioBrosRandomStages-v0", stages="1-1,1-2").to_dict()
    assert run_env(stage_run) == "SuperMarioBros-1-2-v0" and run_env(tmp_path / "nothing") is None
    (tmp_path / "world-s0").mkdir()
    (tmp_path / "world-s0" / "config.json").write_text(json.dumps({"config": world}))
    assert run_env(tmp_path / "world-s0") == "SuperMarioBrosRandomStages-v0 (1-1,1-2)"

    def write(name: str, run: str, env: str | None = None) -> None:
        result = {"name": name, "protocol": protocol, "seeds": [{"run": str(tmp_path / run)}]}
        (tmp_path / f"{name}.json").write_text(json.dumps(result | ({"env": env} if env else {})))

    write("catch", "catch-s0")  # written before results recorded their env: its run's config says
    write("stage12", "catch-s0", env="SuperMarioBros-1-2-v0")  # the env it records wins
    write("old12", "old12-s0")
    write("world", "world-s0")
    write("gone", "gone-s0")  # its runs deleted: nothing says what it measured
    new = {"name": "new", "protocol": protocol, "env": "Catch-v0"}
    assert list(other_variants(tmp_path, new)) == ["catch"]
    assert list(other_variants(tmp_path, new | {"env": "SuperMarioBros-1-2-v0"})) == ["old12", "stage12"]


def test_the_figure_draws_the_variant_and_only_the_ones_compared_with() -> None:
    result = {"name": "new", "seeds": []}
    others = {name: {"name": name, "seeds": []} for name in ("default", "old", "older")}
    assert list(drawn_variants(result, others, None)) == ["new", "default", "old", "older"]
    assert list(drawn_variants(result, others, ["older", "default"])) == ["new", "older", "default"]
    assert drawn_variants(result, others, ["default"])["new"] is result

"""``main.py eval`` and the shared policy runner: figures match an independent replay of
the same seeds, JSON output, checkpoint resolution, and one clear error per mistake."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

from config import Config
from models import QNetwork
from pipeline.commands.evaluate import eval_command
from pipeline.common.errors import UserError
from pipeline.learning.checkpoint import save_checkpoint
from pipeline.learning.policy import load_policy, resolve_checkpoint, run_dir_of
from pipeline.run.evaluator.episode_ends import describe_ends


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Batch-1 inference on one thread (as the commands do): many threads crawl on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def make_checkpoint(
    path: Path, env_id: str = "Catch-v0", *, num_actions: int | None = None, frames: int = 1000, seed: int = 0, **config
) -> tuple[Path, dict]:
    """Save a Trainer.save-shaped checkpoint of a fresh QNetwork; return (path, online state)."""
    import envs

    cfg = Config(env_id=env_id, **config).to_dict()
    n = envs.num_actions(env_id, cfg["action_set"]) if num_actions is None else num_actions
    torch.manual_seed(seed)
    net = QNetwork(n, cfg["frame_stack"], quantiles=cfg["quantiles"])
    with torch.no_grad():  # non-trivial BatchNorm statistics, so eval mode matters
        for module in net.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 2.0)
    state = net.state_dict()
    payload = {
        "learner": {"online": state, "target": state, "updates": 0},
        "counters": {"frames": frames},
        "config": cfg,
        "num_actions": n,
        "rng": {},
    }
    save_checkpoint(path, payload)
    return path, state


def replicate(
    state: dict, env_id: str, *, episodes: int, seed: int, epsilon: float = 0.0, max_steps: int = 0, sticky: float = 0.0
) -> list[dict]:
    """The documented evaluation loop, written out independently of pipeline.commands.evaluate."""
    from envs import make_env, num_actions

    cfg = Config(env_id=env_id).to_dict()
    n = num_actions(env_id, cfg["action_set"])
    net = QNetwork(n, cfg["frame_stack"], quantiles=cfg["quantiles"])
    net.load_state_dict(state)
    net.eval()
    env = make_env(
        env_id,
        action_set=cfg["action_set"],
        frame_skip=cfg["frame_skip"],
        no_progress_steps=cfg["no_progress_steps"],
        max_episode_steps=cfg["max_episode_steps"],
        sticky_actions=sticky,
        seed=seed,
    )
    out = []
    for i in range(episodes):
        # Each episode's random actions come from a generator of its own, seeded with
        # (its seed, 1): the evaluation protocol's epsilon stream.
        rng = np.random.default_rng((seed + i, 1))
        obs, info = env.reset(seed=seed + i)
        stack = np.stack([obs] * cfg["frame_stack"])
        ret, steps = 0.0, 0
        greedy_q, gaps, rewards = {}, [], []  # Q of the action taken at each greedy step
        while True:
            if epsilon > 0 and rng.random() < epsilon:
                action = int(rng.integers(n))
            else:
                with torch.no_grad():
                    q = net(torch.from_numpy(stack[None]))[0]
                action = int(q.argmax())
                greedy_q[steps] = float(q[action])
                best_two = sorted(q.tolist())[-2:]
                gaps.append(best_two[1] - best_two[0])
            obs, reward, terminated, truncated, info = env.step(action)
            ret += reward
            rewards.append(reward * cfg["reward_scale"])
            steps += 1
            stack = np.concatenate([stack[1:], obs[None]])
            if terminated or truncated or (max_steps and steps >= max_steps):
                break
        # The discounted return from each step on, by the definition: sum_k gamma^k r_{t+k}.
        followed = {t: sum(cfg["gamma"] ** k * r for k, r in enumerate(rewards[t:])) for t in greedy_q}
        out.append(
            {
                "return": ret,
                "x_pos": info["x_pos"],
                "flag": info["flag_get"],
                "length": steps,
                "greedy_q": list(greedy_q.values()),
                "followed": [followed[t] for t in greedy_q],
                "gaps": gaps,
            }
        )
    env.close()
    return out


@pytest.mark.parametrize(("epsilon", "max_steps"), [(0.0, 0), (0.3, 0), (0.0, 20)])
def test_eval_matches_an_independent_run_of_the_same_seed(tmp_path, capsys, epsilon, max_steps):
    ckpt, state = make_checkpoint(tmp_path / "run" / "checkpoints" / "ckpt-000000001000.pt")
    argv = [
        "--checkpoint",
        str(ckpt),
        "--episodes",
        "4",
        "--seed",
        "7",
        "--epsilon",
        str(epsilon),
        "--json",
        str(tmp_path / "out" / "eval.json"),
    ]
    if max_steps:
        argv += ["--max-steps", str(max_steps)]
    assert eval_command(argv) == 0
    expected = replicate(state, "Catch-v0", episodes=4, seed=7, epsilon=epsilon, max_steps=max_steps)
    data = json.loads((tmp_path / "out" / "eval.json").read_text())
    xs = [e["x_pos"] for e in expected]
    assert data["per_episode"]["return"] == [e["return"] for e in expected]
    assert data["per_episode"]["x_pos"] == xs
    assert data["per_episode"]["length"] == [e["length"] for e in expected]
    assert data["mean_x_pos"] == pytest.approx(statistics.fmean(xs))
    assert data["median_x_pos"] == pytest.approx(statistics.median(xs))
    assert data["max_x_pos"] == max(xs)
    assert data["flag_rate"] == pytest.approx(statistics.fmean(float(e["flag"]) for e in expected))
    assert data["mean_return"] == pytest.approx(statistics.fmean(e["return"] for e in expected))
    assert data["mean_length"] == pytest.approx(statistics.fmean(e["length"] for e in expected))
    assert data["episodes"] == 4 and data["frames"] == 1000 and data["env_id"] == "Catch-v0"
    if max_steps:
        assert all(length <= max_steps for length in data["per_episode"]["length"])
    printed = capsys.readouterr().out
    assert f"x_pos mean {statistics.fmean(xs):.1f}" in printed and "flag rate" in printed
    # Catch has no one stage: the per-stage table is one row, "all", of the same figures,
    # and its ends are the x_pos of the episodes without the flag, in increasing order.
    ends = sorted(e["x_pos"] for e in expected if not e["flag"])
    assert data["stages"] == [
        {
            "stage": "",
            "episodes": 4,
            "mean_x_pos": data["mean_x_pos"],
            "flag_rate": data["flag_rate"],
            "along": None,
            "ends": ends,
        }
    ]
    # The table's row, the ends' heading and line, then "wrote ...".
    lines = printed.splitlines()
    assert lines[-4].split()[0] == "all"
    assert lines[-2] == f"  all: {describe_ends(ends, 4)}"


def test_sticky_plays_the_same_seeds_with_sticky_actions(tmp_path, capsys):
    ckpt, state = make_checkpoint(tmp_path / "run" / "checkpoints" / "ckpt-000000001000.pt", "SuperMarioBros-1-1-v0")
    figures = {}
    for sticky in ("0.25", "0"):
        out = tmp_path / f"eval-{sticky}.json"
        # Random play (a fresh network mostly runs right, which sticky frames barely change).
        argv = ["--checkpoint", str(ckpt), "--episodes", "2", "--seed", "3", "--epsilon", "1", "--max-steps", "40"]
        assert eval_command([*argv, "--sticky", sticky, "--json", str(out)]) == 0
        figures[sticky] = json.loads(out.read_text())
        assert figures[sticky]["sticky_actions"] == float(sticky)
        expected = replicate(
            state, "SuperMarioBros-1-1-v0", episodes=2, seed=3, epsilon=1.0, max_steps=40, sticky=float(sticky)
        )
        assert figures[sticky]["per_episode"]["x_pos"] == [e["x_pos"] for e in expected]
    assert "epsilon 1, sticky actions 0.25, seed 3" in capsys.readouterr().out
    # The stuck frames change where the same seeds' episodes end.
    assert figures["0.25"]["per_episode"]["x_pos"] != figures["0"]["per_episode"]["x_pos"]


def test_a_random_stages_run_is_evaluated_on_each_listed_stage(tmp_path, capsys):
    """Each stage of the run's list is played as its fixed id with the whole protocol
    (the same seeds on each), and the table has its row: the mean x_pos, that over the
    stage's end (3161 for 1-1, 2425 for 1-3) and the flag rate."""
    env_id = "SuperMarioBrosRandomStages-v0"
    ckpt, state = make_checkpoint(tmp_path / "ckpt-000000001000.pt", env_id, stages="1-3,1-1")
    argv = ["--checkpoint", str(ckpt), "--episodes", "2", "--seed", "5", "--epsilon", "0.5", "--max-steps", "25"]
    assert eval_command([*argv, "--json", str(tmp_path / "stages.json")]) == 0
    data = json.loads((tmp_path / "stages.json").read_text())
    expected = {
        stage: replicate(state, f"SuperMarioBros-{stage}-v0", episodes=2, seed=5, epsilon=0.5, max_steps=25)
        for stage in ("1-3", "1-1")
    }
    ends = {"1-3": 2425, "1-1": 3161}
    assert [row["stage"] for row in data["stages"]] == ["1-3", "1-1"]
    for row in data["stages"]:
        xs = [e["x_pos"] for e in expected[row["stage"]]]
        assert row["episodes"] == 2
        assert row["mean_x_pos"] == pytest.approx(statistics.fmean(xs))
        assert row["along"] == pytest.approx(statistics.fmean(xs) / ends[row["stage"]])
        assert row["flag_rate"] == 0.0
    assert data["per_episode"]["x_pos"] == [e["x_pos"] for stage in ("1-3", "1-1") for e in expected[stage]]
    assert data["per_episode"]["stage"] == [3, 3, 1, 1]
    printed = capsys.readouterr().out
    assert "2 stages (1-3, 1-1): 2 episode(s) each" in printed
    # The table's rows, the ends' heading and a line per stage, then "wrote ...".
    lines = printed.splitlines()
    assert [line.split()[0] for line in lines[-6:-4]] == ["1-3", "1-1"]
    for line, stage in zip(lines[-3:-1], ("1-3", "1-1"), strict=True):
        xs = [e["x_pos"] for e in expected[stage]]  # no flag in 25 steps
        assert line == f"  {stage}: {describe_ends(xs, 2)}"
    # --stages picks among them; a bad list is one clear error.
    assert eval_command([*argv, "--stages", "1-1", "--json", str(tmp_path / "one.json")]) == 0
    one = json.loads((tmp_path / "one.json").read_text())
    assert one["stages"] == [row for row in data["stages"] if row["stage"] == "1-1"]
    with pytest.raises(UserError, match="1-1,1-1") as info:
        eval_command([*argv, "--stages", "1-1,1-1"])
    assert "twice" in str(info.value) and "\n" not in str(info.value)


def test_values_are_the_greedy_steps_q_beside_the_discounted_return_that_followed(tmp_path, capsys):
    ckpt, state = make_checkpoint(tmp_path / "run" / "checkpoints" / "ckpt-000000001000.pt")
    common = ["--checkpoint", str(ckpt), "--episodes", "5", "--epsilon", "0.3", "--seed", "11"]
    assert eval_command(common) == 0
    plain = capsys.readouterr().out.splitlines()
    json_path = tmp_path / "values.json"
    assert eval_command([*common, "--values", "--json", str(json_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == plain[:2]  # the same episodes, the same figures
    assert lines[2].startswith("values over ")

    expected = replicate(state, "Catch-v0", episodes=5, seed=11, epsilon=0.3)
    q = [v for e in expected for v in e["greedy_q"]]
    followed = [v for e in expected for v in e["followed"]]
    gaps = [v for e in expected for v in e["gaps"]]
    assert 0 < len(q) < sum(e["length"] for e in expected)  # random steps are left out
    assert any(r != 0 for r in followed)  # the catches and misses reach the figures
    values = json.loads(json_path.read_text())["values"]
    assert values["greedy_steps"] == len(q)
    assert values["mean_q_taken"] == pytest.approx(statistics.fmean(q), rel=1e-5)
    assert values["mean_return_followed"] == pytest.approx(statistics.fmean(followed), rel=1e-9)
    assert values["median_action_gap"] == pytest.approx(statistics.median(gaps), rel=1e-5, abs=1e-7)
    assert values["q_over_return"] == pytest.approx(statistics.fmean(q) / statistics.fmean(followed), rel=1e-5)


def test_values_need_the_network(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-000000001000.pt")
    with pytest.raises(UserError, match="--values needs the network"):
        eval_command(["--checkpoint", str(ckpt), "--action", "0", "--values"])


def test_eval_reproduces_the_learning_benchmarks_figures_of_a_mark(tmp_path, capsys):
    """The bench's protocol (seeds 5,000,000.., epsilon 0.05) played by ``eval`` gives the
    figures the bench caches for the mark, and its episodes do not depend on how many run."""
    from pipeline.bench.learning_curves import bench_protocol, evaluate_mark

    mark, _ = make_checkpoint(tmp_path / "run" / "checkpoints" / "marks" / "frames-000001000.pt", seed=3)
    protocol = bench_protocol(episodes=6, epsilon=0.3, max_steps=50)
    bench = evaluate_mark(str(mark), protocol.to_dict())
    runs = {}
    for episodes in (6, 3):
        argv = ["--checkpoint", str(mark), "--episodes", str(episodes), "--epsilon", "0.3", "--max-steps", "50"]
        argv += ["--seed", str(protocol.first_seed), "--json", str(tmp_path / f"eval{episodes}.json")]
        assert eval_command(argv) == 0
        runs[episodes] = json.loads((tmp_path / f"eval{episodes}.json").read_text())
    assert runs[6]["mean_x_pos"] == pytest.approx(bench["mean_x_pos"])
    assert runs[6]["flag_rate"] == pytest.approx(bench["flag_rate"])
    assert runs[6]["max_x_pos"] == bench["max_x_pos"]
    assert runs[6]["mean_return"] == pytest.approx(bench["mean_return"])
    assert runs[6]["per_episode"]["x_pos"][:3] == runs[3]["per_episode"]["x_pos"]


def test_eval_is_deterministic_and_accepts_a_run_directory(tmp_path, capsys):
    run = tmp_path / "run"
    make_checkpoint(run / "checkpoints" / "ckpt-000000000500.pt", seed=1, frames=500)
    newest, _ = make_checkpoint(run / "checkpoints" / "ckpt-000000002000.pt", seed=2, frames=2000)
    assert resolve_checkpoint(run) == newest
    assert run_dir_of(newest) == run.resolve()
    outputs = []
    for name in ("a.json", "b.json"):
        assert eval_command(["--checkpoint", str(run), "--episodes", "2", "--json", str(tmp_path / name)]) == 0
        outputs.append(json.loads((tmp_path / name).read_text()))
    assert outputs[0] == outputs[1]
    assert outputs[0]["checkpoint"] == str(newest) and outputs[0]["frames"] == 2000


def test_policy_keeps_batchnorm_statistics_and_eval_mode(tmp_path):
    ckpt, state = make_checkpoint(tmp_path / "ckpt-1.pt")
    policy = load_policy(ckpt)
    assert not policy.model.training
    loaded = policy.model.state_dict()
    for key, value in state.items():
        assert torch.equal(loaded[key], value), key


def saved_replay(path: Path, frame_stack: int = 4) -> Path:
    """A replay file of one stream of random-looking frames, as a run saves it."""
    import random

    from pipeline.learning.replay import ReplayMemory
    from tests.pipeline.learning.test_replay import IdCounter, build_stream, to_array

    memory = ReplayMemory(400, 1, frame_stack=frame_stack)
    memory.add(0, to_array(build_stream([(60, "term")] * 5, IdCounter(), random.Random(0))))
    memory.save(path)
    return path


def test_recalibrate_re_estimates_the_statistics_on_the_replays_states(tmp_path, capsys, monkeypatch):
    """--recalibrate: the statistics become those of the seeded draw of replay states in
    chunks of the run's batch size (what recalibrate computes, tested by hand in
    tests/pipeline/learning/test_batchnorm_stats.py), the weights stay, and the command
    says so and plays with them."""
    from pipeline.commands.evaluate import recalibrate_policy
    from pipeline.learning.batchnorm_stats import recalibrate
    from pipeline.learning.replay import ReplayMemory

    ckpt, state = make_checkpoint(tmp_path / "ckpt-000000001000.pt", batch_size=16)
    replay = saved_replay(tmp_path / "replay.npz")
    policy = load_policy(ckpt)
    said = recalibrate_policy(policy, str(replay), 64, seed=7)
    assert said.startswith("BatchNorm statistics re-estimated on 64 states") and "chunks of 16" in said
    assert not policy.model.training

    expected = load_policy(ckpt).model
    obs = ReplayMemory.load(replay).sample_states(64, torch.Generator().manual_seed(7))
    recalibrate([expected], obs.split(16))
    got = policy.model.state_dict()
    for key, value in expected.state_dict().items():
        torch.testing.assert_close(got[key], value, msg=key)
        if "running_mean" in key:
            assert not torch.allclose(got[key], state[key]), key  # they did change
        elif "running" not in key and "num_batches" not in key:
            assert torch.equal(got[key], state[key]), key  # the weights did not

    out = tmp_path / "eval.json"
    argv = ["--checkpoint", str(ckpt), "--episodes", "2", "--seed", "7", "--json", str(out)]
    assert eval_command([*argv, "--recalibrate", str(replay), "--recalibrate-states", "64"]) == 0
    assert said in capsys.readouterr().out
    assert json.loads(out.read_text())["recalibrated"] == said

    # Another draw of the states (--recalibrate-seed) plays the same episodes (seed 7) with
    # the statistics of that draw, which differ from seed 7's.
    other = load_policy(ckpt)
    assert recalibrate_policy(other, str(replay), 64, seed=8) == said
    assert not torch.equal(other.model.state_dict()["features.1.running_mean"], got["features.1.running_mean"])
    import pipeline.commands.evaluate as evaluate

    draws = []
    monkeypatch.setattr(evaluate, "recalibrate_policy", lambda *a: draws.append(a[3]) or recalibrate_policy(*a))
    argv_redrawn = [*argv, "--recalibrate", str(replay), "--recalibrate-states", "64", "--recalibrate-seed", "8"]
    assert eval_command(argv_redrawn) == 0 and eval_command([*argv, "--recalibrate", str(replay)]) == 0
    assert draws == [8, 7]  # the draw's seed, else the episodes'
    assert json.loads(out.read_text())["seed"] == 7


def test_a_constant_action_is_played_instead_of_the_network(tmp_path, capsys):
    """``--action`` is the reference policy: the same protocol, that action at every
    step that is not random, whatever the checkpoint's weights would choose."""
    from envs import make_env

    ckpt, _ = make_checkpoint(tmp_path / "ckpt-000000001000.pt")
    argv = ["--checkpoint", str(ckpt), "--episodes", "3", "--seed", "11", "--epsilon", "0.2", "--action", "2"]
    assert eval_command([*argv, "--json", str(tmp_path / "constant.json")]) == 0
    data = json.loads((tmp_path / "constant.json").read_text())
    assert data["action"] == 2
    assert "the constant action 2 (" in capsys.readouterr().out
    env = make_env("Catch-v0", seed=11)
    for i in range(3):
        rng = np.random.default_rng((11 + i, 1))  # the protocol's epsilon stream
        env.reset(seed=11 + i)
        steps, done = 0, False
        while not done:
            action = int(rng.integers(3)) if rng.random() < 0.2 else 2
            *_, terminated, truncated, info = env.step(action)
            steps, done = steps + 1, terminated or truncated
        assert data["per_episode"]["length"][i] == steps
        assert data["per_episode"]["x_pos"][i] == info["x_pos"]
    env.close()

"""``main.py eval``'s mistakes: each one clear error in one line (a missing, corrupt or foreign
checkpoint, another action set, a bad flag, an unwritable JSON path), and a checkpoint of a
removed option refused by name."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from config import Config
from pipeline.commands.evaluate import eval_command
from pipeline.common.errors import UserError
from pipeline.learning.checkpoint import CheckpointError, save_checkpoint
from pipeline.learning.policy import load_policy
from tests.pipeline.commands.test_evaluate import make_checkpoint, saved_replay


def test_a_checkpoint_of_a_removed_option_is_refused_and_one_at_todays_value_plays(tmp_path):
    """Removed options at the value the code now always has load as before; another value
    is refused in one line that names the option, its value and the tag."""
    from config import RemovedOptionError
    from pipeline.learning.checkpoint import load_checkpoint

    ckpt, _ = make_checkpoint(tmp_path / "ckpt-000000001000.pt")
    payload = load_checkpoint(ckpt)
    payload["config"].update(prev_action_input=False, batch_norm=True, adam_eps=1.5e-4, bn_momentum=0.01)
    save_checkpoint(ckpt, payload)
    assert load_policy(ckpt).config.to_dict() == Config.from_dict(payload["config"]).to_dict()
    payload["config"]["prev_action_input"] = True
    save_checkpoint(ckpt, payload)
    with pytest.raises(RemovedOptionError) as info:
        eval_command(["--checkpoint", str(ckpt), "--episodes", "1"])
    message = str(info.value)
    assert "\n" not in message and str(ckpt) in message
    assert "was trained with prev_action_input=True, an option removed after the tag pre-option-removal" in message


def test_missing_checkpoint_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="does not exist") as info:
        eval_command(["--checkpoint", str(tmp_path / "nope.pt")])
    assert "\n" not in str(info.value) and "nope.pt" in str(info.value)


def test_run_directory_without_checkpoints_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="no checkpoint"):
        eval_command(["--checkpoint", str(tmp_path)])


def test_corrupt_checkpoint_is_one_clear_error(tmp_path):
    bad = tmp_path / "ckpt-5.pt"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(CheckpointError, match="corrupt") as info:
        eval_command(["--checkpoint", str(bad)])
    assert "\n" not in str(info.value)


def test_foreign_payload_is_one_clear_error(tmp_path):
    path = tmp_path / "ckpt-5.pt"
    save_checkpoint(path, {"weights": torch.zeros(3)})
    with pytest.raises(CheckpointError, match="not a training checkpoint"):
        eval_command(["--checkpoint", str(path)])


def test_checkpoint_for_another_action_set_is_one_clear_error(tmp_path):
    # Trained with the 12-action "complex" set, but its config says "right_only" (5 actions).
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-1.pt", "SuperMarioBros-1-1-v0", num_actions=12)
    with pytest.raises(UserError) as info:
        eval_command(["--checkpoint", str(ckpt)])
    message = str(info.value)
    assert "trained with 12 actions (action_set right_only)" in message and "gives 5" in message
    assert "\n" not in message


def test_env_override_with_another_action_count_is_one_clear_error(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-1.pt", "Catch-v0")
    with pytest.raises(UserError) as info:
        eval_command(["--checkpoint", str(ckpt), "--env", "SuperMarioBros-1-1-v0"])
    message = str(info.value)
    assert "trained with 3 actions" in message and "gives 5" in message and "Catch-v0" in message


def test_unknown_env_override_is_one_clear_error(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-1.pt")
    with pytest.raises(UserError, match="Pong-v5"):
        eval_command(["--checkpoint", str(ckpt), "--env", "Pong-v5"])


def test_unwritable_json_path_fails_before_playing(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-1.pt")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(UserError, match="cannot write JSON file"):
        eval_command(["--checkpoint", str(ckpt), "--json", str(a_file / "eval.json")])


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--episodes", "0", "--episodes"),
        ("--epsilon", "2", "from 0 to 1"),
        ("--epsilon", "x", "from 0 to 1"),
        ("--seed", "-1", "--seed"),
        ("--max-steps", "many", "whole number"),
    ],
)
def test_bad_flag_values_are_one_clear_error(tmp_path, flag, value, fragment):
    with pytest.raises(UserError, match=fragment) as info:
        eval_command(["--checkpoint", str(tmp_path / "x.pt"), flag, value])
    assert "\n" not in str(info.value) and os.linesep not in str(info.value)


def test_an_action_outside_the_set_is_one_clear_error(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-000000001000.pt")
    with pytest.raises(UserError, match="--action 3 is not an action of this set") as info:
        eval_command(["--checkpoint", str(ckpt), "--action", "3"])
    assert "\n" not in str(info.value)


def test_recalibrate_mistakes_are_one_clear_error(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-000000001000.pt")
    with pytest.raises(UserError, match="--recalibrate") as info:
        eval_command(["--checkpoint", str(ckpt), "--recalibrate", str(tmp_path / "none.npz")])
    assert "\n" not in str(info.value) and "none.npz" in str(info.value)
    with pytest.raises(UserError, match="needs --recalibrate REPLAY"):
        eval_command(["--checkpoint", str(ckpt), "--recalibrate-states", "64"])
    with pytest.raises(UserError, match="--recalibrate-seed needs --recalibrate REPLAY"):
        eval_command(["--checkpoint", str(ckpt), "--recalibrate-seed", "3"])
    replay = saved_replay(tmp_path / "replay2.npz", frame_stack=2)
    with pytest.raises(UserError, match="stack 2 frames"):
        eval_command(["--checkpoint", str(ckpt), "--recalibrate", str(replay)])

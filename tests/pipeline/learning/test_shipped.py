"""Shipped networks: what an export holds (the acting weights in the storage type, the
config, the provenance), and how ``--checkpoint`` names resolve to the shipped files."""

from __future__ import annotations

import pytest
import torch

from config import Config
from pipeline.common.errors import UserError
from pipeline.learning import shipped
from pipeline.learning.checkpoint import load_checkpoint, save_checkpoint
from pipeline.learning.policy import load_policy, network_of, resolve_checkpoint
from pipeline.learning.shipped import acting_weights, export_payload, shipped_names, shipped_path

CATCH = Config(env_id="Catch-v0", seed=3)


def network_state(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    net = network_of(CATCH, 3)
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 2.0)
                module.num_batches_tracked.fill_(7)
    return net.state_dict()


def payload(acting: bool = True) -> dict:
    online = network_state(0)
    return {
        "learner": {
            "online": online,
            "target": online,
            "acting": network_state(1) if acting else None,
            "updates": 120,
            "optimizer": {"state": {}},
        },
        "counters": {"frames": 5000, "episodes": 12},
        "config": CATCH.to_dict(),
        "num_actions": 3,
        "rng": {"torch": torch.zeros(4, dtype=torch.uint8)},
    }


def export(source: dict, dtype: str = "float16", **kwargs) -> dict:
    config = Config.from_dict(source["config"]).to_dict()
    return export_payload(source, config=config, dtype=dtype, source="run/checkpoints/ckpt-5000.pt", **kwargs)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_export_holds_the_acting_copy_in_the_storage_type_and_nothing_else(dtype):
    source = payload()
    out = export(source, dtype, trained_with="python main.py --preset tiny", figures={"mean_x_pos": 40.0})
    weights = out["learner"]["acting"]
    assert set(weights) == set(source["learner"]["acting"])
    for key, value in weights.items():
        original = source["learner"]["acting"][key]
        if original.is_floating_point():
            assert value.dtype == getattr(torch, dtype)
            assert torch.equal(value, original.to(value.dtype))  # the acting copy, not the online net
        else:  # BatchNorm's counter stays an integer
            assert value.dtype == original.dtype and torch.equal(value, original)
        assert value.data_ptr() != original.data_ptr()
    assert set(out) == {"learner", "config", "num_actions", "counters", "provenance"}
    assert set(out["learner"]) == {"acting", "updates"}  # no target, optimizer or online net
    assert out["num_actions"] == 3 and out["counters"]["frames"] == 5000
    assert Config.from_dict(out["config"]) == Config.from_dict(source["config"])
    record = out["provenance"]
    assert record["weights"] == "averaged acting copy" and record["dtype"] == dtype
    assert (record["frames"], record["updates"], record["seed"], record["env_id"]) == (5000, 120, 3, "Catch-v0")
    assert record["trained_with"] == "python main.py --preset tiny" and record["figures"] == {"mean_x_pos": 40.0}
    assert record["source"] == "run/checkpoints/ckpt-5000.pt"


def test_a_run_without_an_acting_copy_exports_its_online_network():
    source = payload(acting=False)
    out = export(source, "float32")
    assert out["provenance"]["weights"] == "online network"
    assert all(torch.equal(out["learner"]["acting"][k], v) for k, v in source["learner"]["online"].items())
    assert acting_weights(source) is source["learner"]["online"]


def test_an_export_of_an_export_keeps_the_first_record():
    first = export(payload(), "float32", trained_with="python main.py --seed 3", figures={"flag_rate": 0.5})
    again = export(first, "float16")
    assert again["provenance"]["trained_with"] == "python main.py --seed 3"
    assert again["provenance"]["figures"] == {"flag_rate": 0.5}
    assert again["provenance"]["source"] == "run/checkpoints/ckpt-5000.pt"
    assert again["provenance"]["weights"] == "averaged acting copy" and again["provenance"]["dtype"] == "float16"
    assert export(first, "float16", trained_with="other")["provenance"]["trained_with"] == "other"


def test_an_unknown_storage_type_is_refused():
    with pytest.raises(ValueError, match="dtype must be one of"):
        export(payload(), "int8")


def test_an_export_file_round_trips_and_loads_as_a_policy_with_the_same_values(tmp_path):
    source = payload()
    path = tmp_path / "catch.pt"
    save_checkpoint(path, export(source, "float32"))
    loaded = load_checkpoint(path)
    assert all(torch.equal(loaded["learner"]["acting"][k], v) for k, v in source["learner"]["acting"].items())
    policy = load_policy(path)
    assert policy.provenance is not None and policy.provenance["frames"] == 5000
    assert (policy.env_id, policy.num_actions, policy.frames) == ("Catch-v0", 3, 5000)
    net = network_of(CATCH, 3)
    net.load_state_dict(source["learner"]["acting"])
    obs = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        assert torch.equal(policy.model(obs), net.eval()(obs))


# ---------------------------------------------------------------------- names


@pytest.fixture
def trained_dir(tmp_path, monkeypatch):
    """A stand-in for models/trained/ holding one Catch export."""
    directory = tmp_path / "trained"
    directory.mkdir()
    monkeypatch.setattr(shipped, "shipped_dir", lambda: directory)
    save_checkpoint(directory / "Catch-v0.pt", export(payload(), "float16"))
    return directory


def test_shipped_dir_is_beside_the_network_package():
    import models

    assert shipped.shipped_dir() == shipped.Path(models.__file__).parent / "trained"


def test_a_shipped_name_or_none_resolves_to_the_shipped_file(trained_dir, tmp_path, monkeypatch):
    assert shipped_names() == ["Catch-v0"]
    assert resolve_checkpoint("Catch-v0") == trained_dir / "Catch-v0.pt"
    assert resolve_checkpoint("Catch-v0.pt") == trained_dir / "Catch-v0.pt"
    assert resolve_checkpoint(None, "Catch-v0") == trained_dir / "Catch-v0.pt"
    assert load_policy(None, "Catch-v0").path == trained_dir / "Catch-v0.pt"
    monkeypatch.setattr("config.ENV_ID", "Catch-v0")  # the knob picks the default env
    assert resolve_checkpoint(None) == trained_dir / "Catch-v0.pt"
    # A path that exists wins over a shipped name.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Catch-v0").mkdir()
    with pytest.raises(UserError, match="no checkpoint"):
        resolve_checkpoint("Catch-v0")


def test_no_shipped_file_is_one_clear_error(trained_dir):
    with pytest.raises(UserError, match=r"no shipped network for SuperMarioBros-1-2-v0 .*shipped: Catch-v0") as info:
        resolve_checkpoint(None, "SuperMarioBros-1-2-v0")
    assert "python main.py export" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(UserError, match=r"does not exist.*or a shipped name \(Catch-v0\)"):
        resolve_checkpoint("SuperMarioBros-1-2-v0")
    assert shipped_path("x") == trained_dir / "x.pt"

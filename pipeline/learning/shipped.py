"""Shipped policies: where the repository keeps trained networks, and what such a file holds.

``models/trained/<env id>.pt`` is the network ``python main.py play`` and ``eval`` use
when no ``--checkpoint`` is given, and ``--checkpoint <env id>`` names one. The file is
an *export* of a checkpoint or a mark (``python main.py export``): the weights the run
acted with only, without the target network, the optimizer, the replay or RNG states, so
it stays a few MB in the repository. It has the layout of a mark, so the one loader,
:func:`~pipeline.learning.policy.load_policy`, reads a checkpoint, a mark and an export:

- ``learner["acting"]``: the acting weights, the averaged acting copy's ``state_dict``
  with the BatchNorm statistics calibrated for it when the run had one, else the
  online network's (:func:`acting_weights`); floating tensors stored in ``dtype``
  (``load_state_dict`` casts them back to the network's float32);
- ``config``: the run's whole ``Config.to_dict()`` (read back through
  ``Config.from_dict``, like any checkpoint's), which rebuilds the network (frame
  stack, quantiles, ...) and the env (env id, action set, frame skip, truncation);
- ``num_actions`` and ``counters`` (the frames it was trained for);
- ``provenance``: where it came from (source file, frames, updates, seed, the training
  command and the evaluation figures when the exporter gave them, the storage dtype).

Importing this module is cheap; torch loads when an export is built.
"""

from __future__ import annotations

import importlib.util
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "EXPORT_DTYPES",
    "EXPORT_FORMAT",
    "acting_weights",
    "default_env_id",
    "export_payload",
    "is_shipped_name",
    "shipped_dir",
    "shipped_names",
    "shipped_path",
]

EXPORT_FORMAT = "mario-dqn export 1"
# Storage types for the weights: float32 is exact; half precision halves the file.
EXPORT_DTYPES = ("float32", "float16", "bfloat16")
# A shipped name is a file name without directories: an env id such as SuperMarioBros-1-1-v0.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def shipped_dir() -> Path:
    """``models/trained/`` beside the network's package, wherever the project is installed.

    Found without importing ``models`` (which loads torch): commands that only resolve a
    name stay quick.
    """
    spec = importlib.util.find_spec("models")
    assert spec is not None and spec.submodule_search_locations, "the models package is part of this project"
    return Path(next(iter(spec.submodule_search_locations))) / "trained"


def default_env_id() -> str:
    """The env a plain ``play``/``eval`` plays: ``ENV_ID`` in config.py, else Config's default."""
    import config

    return config.ENV_ID or config.Config().env_id


def is_shipped_name(text: str) -> bool:
    """Whether ``text`` can name a shipped file (no directory part)."""
    return bool(_NAME.match(text))


def shipped_path(name: str) -> Path:
    """The shipped file of ``name`` (an env id, with or without ``.pt``); it may not exist."""
    stem = name[:-3] if name.endswith(".pt") else name
    return shipped_dir() / f"{stem}.pt"


def shipped_names() -> list[str]:
    """The names of the shipped files present, sorted."""
    directory = shipped_dir()
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.pt") if p.is_file())


def acting_weights(payload: dict[str, Any]) -> dict[str, Any]:
    """The weights a checkpoint, mark or export acts with: the acting copy (``acting_tau``)
    when it has one, else the online network. Raises KeyError or TypeError when the
    payload has neither."""
    learner = payload["learner"]
    return learner.get("acting") or learner["online"]


def export_payload(
    payload: dict[str, Any],
    *,
    config: dict[str, Any],
    dtype: str,
    source: str,
    trained_with: str | None = None,
    figures: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The export of a loaded checkpoint/mark ``payload`` (see the module docstring).

    ``config`` is the payload's config as ``Config.from_dict(...).to_dict()`` gives it;
    ``dtype`` one of :data:`EXPORT_DTYPES`; ``source`` names the file exported;
    ``trained_with`` the command that trained it and ``figures`` its evaluation figures,
    when known. Tensors are copied: the export never shares storage with ``payload``.
    """
    import torch

    if dtype not in EXPORT_DTYPES:
        raise ValueError(f"dtype must be one of {EXPORT_DTYPES}, got {dtype!r}")
    storage = getattr(torch, dtype)
    learner = payload["learner"]
    acting = acting_weights(payload)
    weights = {
        # Integer buffers (BatchNorm's num_batches_tracked) keep their type.
        key: value.detach().to("cpu", storage if value.is_floating_point() else value.dtype).clone()
        for key, value in acting.items()
    }
    counters = {key: int(value) for key, value in dict(payload.get("counters") or {}).items()}
    # An export of an export (another dtype, figures added) keeps what the first one knew.
    earlier = dict(payload.get("provenance") or {})
    provenance = {
        "format": EXPORT_FORMAT,
        "source": earlier.get("source", source),
        "weights": earlier.get("weights") or ("averaged acting copy" if learner.get("acting") else "online network"),
        "dtype": dtype,
        "env_id": config["env_id"],
        "frames": counters.get("frames", 0),
        "updates": int(learner.get("updates", 0) or 0),
        "seed": config.get("seed"),
        "trained_with": trained_with if trained_with is not None else earlier.get("trained_with"),
        "figures": figures if figures is not None else earlier.get("figures"),
        "exported_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return {
        "learner": {"acting": weights, "updates": provenance["updates"]},
        "config": dict(config),
        "num_actions": int(payload["num_actions"]),
        "counters": counters,
        "provenance": provenance,
    }

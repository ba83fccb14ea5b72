"""Checkpoint files: atomic saves, safe loads, rotation, compatibility checks, RNG state.

A checkpoint payload is a plain dict of tensors, numbers, strings, lists, tuples and
dicts (the config as a dict, counters, the learner's ``state_dict``, RNG states). That
is exactly what ``torch.load(weights_only=True)`` accepts, and loading never runs
pickled code: a file that would need arbitrary objects is refused with a
``CheckpointError`` instead of being executed.

Saves are atomic: the payload is written to a temporary file in the destination
directory, flushed and fsynced, then ``os.replace``d over the destination, so a crash or
error mid-write leaves the previous checkpoint intact (and the temporary file removed).

Periodic checkpoints are named ``ckpt-<frames>.pt``; ``rotate_checkpoints`` keeps the
newest (highest frame count) K of them plus the best-model file.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pipeline.common.files import atomic_write

__all__ = [
    "CHECKPOINT_PATTERN",
    "CheckpointError",
    "capture_rng_state",
    "check_compatible",
    "checkpoint_name",
    "load_checkpoint",
    "restore_rng_state",
    "rotate_checkpoints",
    "save_checkpoint",
]

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^ckpt-(\d+)\.pt$")


class CheckpointError(Exception):
    """A checkpoint could not be written, read or used; the message says path, problem, fix."""


def checkpoint_name(frames: int) -> str:
    """The file name of the periodic checkpoint taken at ``frames`` environment frames."""
    return f"ckpt-{int(frames)}.pt"


# ---------------------------------------------------------------------- save / load


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable on POSIX; not possible (nor needed) everywhere.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Atomically write ``payload`` to ``path`` (tmp file in the same dir, fsync, rename).

    Raises ``CheckpointError`` if writing fails; the previous file at ``path`` (if any)
    is then untouched and the temporary file is removed.
    """
    path = Path(path)
    if not isinstance(payload, dict):
        raise CheckpointError(
            f"cannot save checkpoint {path}: the payload is a {type(payload).__name__}, "
            "expected a dict; pass a plain dict of tensors, numbers, strings and containers"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(
            f"cannot save checkpoint {path}: could not create directory {path.parent} "
            f"({exc}); check the path and its permissions"
        ) from exc
    try:
        with atomic_write(path) as handle:  # removes its temporary file on any failure
            torch.save(payload, handle)
    except Exception as exc:
        raise CheckpointError(
            f"could not write checkpoint {path}: {type(exc).__name__}: {exc}. The previous "
            "checkpoint at that path (if any) is intact; check free disk space and write "
            "permissions, and that the payload holds only tensors, numbers, strings and "
            "containers"
        ) from exc
    _fsync_directory(path.parent)


def load_checkpoint(path: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``torch.load(weights_only=True)``; never runs pickled code.

    Raises ``CheckpointError`` for a missing, unreadable, truncated or corrupt file, for
    a file that needs arbitrary (code-running) objects, and for a non-dict payload.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(
            f"checkpoint {path} does not exist; check the path (periodic checkpoints are "
            "named ckpt-<frames>.pt) or start without resuming"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} is not a regular file; pass a .pt file path")
    try:
        # torch warns about odd pickle protocols before refusing them; the user gets one
        # clear CheckpointError instead.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        # The safe unpickler names the blocked global ("Unsupported global: GLOBAL
        # posix.system ...") when a file asks for code; other failures are garbage bytes.
        if "global" in str(exc).lower():
            raise CheckpointError(
                f"checkpoint {path} was refused: it references Python objects that a safe "
                "(weights_only) load does not allow, which could run arbitrary code. Do "
                "not load it unless you wrote it yourself; re-save it as a plain dict of "
                f"tensors, numbers, strings and containers. Detail: {_detail(exc, ('global',))}"
            ) from exc
        raise _corrupt(path, exc) from exc
    except Exception as exc:
        # Broken files fail in many ways (RuntimeError from the zip reader, EOFError,
        # IndexError inside the unpickler, ...): all mean "cannot be read".
        raise _corrupt(path, exc) from exc
    if not isinstance(payload, dict):
        raise CheckpointError(
            f"checkpoint {path} holds a {type(payload).__name__}, expected a dict payload; "
            "it was not written by save_checkpoint"
        )
    return payload


_DETAIL_KEYWORDS: tuple[str, ...] = ("unsupported", "failed", "error")


def _detail(exc: BaseException, keywords: tuple[str, ...] = _DETAIL_KEYWORDS) -> str:
    """The informative line of a (often multi-paragraph) torch.load error, shortened."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    # torch's weights_only errors open with generic advice and name the cause on a later
    # line; keywords are tried in priority order ("Unsupported operand 205" first).
    matches = (line for k in keywords for line in lines if k in line.lower())
    chosen = next(matches, lines[0] if lines else "")
    if len(chosen) > 200:
        chosen = chosen[:197] + "..."
    return f"{type(exc).__name__}: {chosen}"


def _corrupt(path: Path, exc: BaseException) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path} is truncated, corrupt or not a torch checkpoint and cannot be read "
        f"({_detail(exc)}); resume from an older ckpt-<frames>.pt in the same "
        "directory or start fresh"
    )


# ---------------------------------------------------------------------- rotation


def rotate_checkpoints(directory: Path, keep_last: int, best: Path | None = None) -> None:
    """Delete all but the ``keep_last`` newest ``ckpt-<frames>.pt`` files in ``directory``.

    "Newest" means the highest frame count in the name (not mtime, which copies and
    restores change). ``best`` (normally ``directory / "best.pt"``) is never deleted;
    if it is a symlink its target is kept too. Other files are left alone.
    """
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    directory = Path(directory)
    protected: set[Path] = set()
    if best is not None:
        best = Path(best)
        protected.add(best.absolute())
        if best.is_symlink():
            protected.add(best.resolve())
    checkpoints: list[tuple[int, Path]] = []
    for entry in directory.iterdir():
        match = CHECKPOINT_PATTERN.match(entry.name)
        if match and entry.is_file():
            checkpoints.append((int(match.group(1)), entry))
    checkpoints.sort(key=lambda item: item[0], reverse=True)
    for _, entry in checkpoints[keep_last:]:
        if entry.absolute() in protected or entry.resolve() in protected:
            continue
        try:
            entry.unlink()
        except FileNotFoundError:
            pass  # removed concurrently: the goal is reached anyway
        except OSError as exc:
            logger.warning("could not delete old checkpoint %s: %s", entry, exc)


# ---------------------------------------------------------------------- compatibility


def check_compatible(model: nn.Module, state: dict[str, Any], path: Path | str) -> None:
    """Raise ``CheckpointError`` unless ``state`` (a model state_dict) fits ``model``.

    Names the first missing, unexpected or shape-mismatched key with both shapes, so a
    checkpoint from another action count / frame stack / head type fails with a clear
    message instead of a long ``load_state_dict`` traceback.
    """
    expected = model.state_dict()
    hint = (
        "the checkpoint was made for a different network (action count, frame_stack or "
        "quantiles); use the matching config or start a fresh run"
    )
    for key, tensor in expected.items():
        if key not in state:
            raise CheckpointError(f"checkpoint {path} does not fit the model: key {key!r} is missing; {hint}")
        found = state[key]
        if not isinstance(found, torch.Tensor):
            raise CheckpointError(
                f"checkpoint {path} does not fit the model: {key!r} is a "
                f"{type(found).__name__}, expected a tensor; {hint}"
            )
        if tuple(found.shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"checkpoint {path} does not fit the model: {key!r} has shape "
                f"{tuple(found.shape)} in the checkpoint but {tuple(tensor.shape)} in the "
                f"model; {hint}"
            )
    unexpected = [key for key in state if key not in expected]
    if unexpected:
        raise CheckpointError(
            f"checkpoint {path} does not fit the model: unexpected key {unexpected[0]!r}"
            f"{f' (and {len(unexpected) - 1} more)' if len(unexpected) > 1 else ''}; {hint}"
        )


# ---------------------------------------------------------------------- RNG state


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy (global), torch CPU (and CUDA) RNG states, weights_only-loadable.

    Python and NumPy states become plain ints/lists; torch states stay uint8 tensors.
    """
    py_version, py_internal, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": {"version": int(py_version), "state": list(py_internal), "gauss_next": py_gauss},
        "numpy": {
            "name": str(np_name),
            "keys": [int(k) for k in np_keys],
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``capture_rng_state`` returned (CUDA states only where devices exist)."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    npy = state["numpy"]
    np.random.set_state(
        (
            npy["name"],
            np.asarray(npy["keys"], dtype=np.uint32),
            npy["pos"],
            npy["has_gauss"],
            npy["cached_gaussian"],
        )
    )
    # set_rng_state needs a CPU uint8 tensor even if the payload was mapped elsewhere.
    torch.set_rng_state(state["torch"].to(device="cpu", dtype=torch.uint8))
    cuda_states = state.get("cuda")
    if cuda_states:
        if not torch.cuda.is_available():
            logger.warning("checkpoint has CUDA RNG states but CUDA is unavailable; skipped")
            return
        count = min(len(cuda_states), torch.cuda.device_count())
        if count < len(cuda_states):
            logger.warning(
                "checkpoint has %d CUDA RNG states but only %d devices; restoring %d",
                len(cuda_states),
                torch.cuda.device_count(),
                count,
            )
        for index in range(count):
            torch.cuda.set_rng_state(cuda_states[index].cpu(), device=index)

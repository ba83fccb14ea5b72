"""A model's state_dict as one flat float32 vector, and back, for the weights block.

:class:`pipeline.transport.weights.WeightsBlock` moves flat float32 vectors between
processes and knows nothing of torch; this module is the torch side of it: the learner
flattens its ``state_dict`` (BatchNorm buffers included) once per publish, and each
subscriber (collector, evaluator) loads the vector back into its module in place.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch


def state_numel(state: Mapping[str, torch.Tensor]) -> int:
    """Floats a state_dict takes in the weights block."""
    return sum(t.numel() for t in state.values())


def flatten_state(state: Mapping[str, torch.Tensor]) -> np.ndarray:
    """The state_dict as one float32 CPU vector, in state_dict order."""
    return torch.cat([t.detach().reshape(-1).to("cpu", torch.float32) for t in state.values()]).numpy()


class StateLoader:
    """Copies a flat float32 vector into a module's state tensors, in place.

    Built once per collector: the (tensor, offset) plan is fixed, so each load is one
    ``copy_`` per tensor with no allocation beyond the staging vector.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        self.targets = list(module.state_dict().values())
        self.num_floats = state_numel(module.state_dict())
        self.staging = np.empty(self.num_floats, np.float32)

    @torch.no_grad()
    def load(self, flat: np.ndarray | None = None) -> None:
        source = torch.from_numpy(self.staging if flat is None else flat)
        offset = 0
        for tensor in self.targets:
            n = tensor.numel()
            # copy_ casts float32 -> int64 for BatchNorm's num_batches_tracked.
            tensor.copy_(source[offset : offset + n].view(tensor.shape))
            offset += n

"""The Q-network: a Nature-DQN convolutional trunk with BatchNorm and a dueling head.

Input is the raw uint8 frame stack ``[B, S, 84, 84]``; the network converts it to float
and scales it to [0, 1] inside ``forward`` (in the first convolution's weights:
:meth:`QNetwork.trunk`) so that the host-to-device copy (and the shared-memory replay)
moves 1 byte per pixel instead of 4.

Architecture (Mnih et al. 2015, with BatchNorm2d after every conv):

    conv 32 8x8/4 -> BN -> ReLU
    conv 64 4x4/2 -> BN -> ReLU
    conv 64 3x3/1 -> BN -> ReLU
    flatten (64*7*7 = 3136) -> fc 512 -> ReLU
    dueling head: V(s) + A(s, a) - mean_a A(s, a)      (Wang et al. 2016)

With ``quantiles`` N > 0 (QR-DQN, Dabney et al. 2018) each head outputs N values per
action, the quantiles of the return at the midpoints (2i - 1) / 2N, dueling per quantile;
``forward`` then returns their mean, the Q-value, so everything that acts, calibrates or
probes the network is the same for both, and :meth:`QNetwork.quantile_values` gives the
learner the quantiles.

Under autocast (the learner's bf16 or fp16) the trunk and fc run in low precision and the
output layers in fp32: the greedy action depends on gaps between Q-values a hundred times
smaller than the values, finer than bf16 resolves (``forward``).

Initialisation (He et al. 2015): convs use ``kaiming_normal_(mode="fan_out",
nonlinearity="relu")`` as torchvision does for convs followed by BatchNorm (BN rescales
the forward signal anyway, so fan_out keeps the *backward* signal well scaled); the hidden
fc layer uses ``kaiming_normal_(mode="fan_in", nonlinearity="relu")`` because nothing
normalises after it; the output layers use fan_in with a linear gain so initial Q-values
start near zero with unit-ish spread. BN weight = 1, BN bias = 0, linear biases = 0.

The head is always dueling: every network the learning benchmark measured had it, and
the plain linear head went with its option (``configuration.removed``, tag ``pre-house-removal``).

The BatchNorm is always there: the BatchNorm-free trunk of Nature DQN, SPR and BBF lost
to it on the learning benchmark (docs/learning-history.md), and the learner keeps the running
statistics precise for the eval-mode forwards instead (``pipeline/learning/batchnorm_stats.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["QNetwork", "build_qnetwork"]

# Spatial size after the three convs on an 84x84 input: 84 -> 20 -> 9 -> 7.
_TRUNK_OUT_FEATURES: int = 64 * 7 * 7
_HIDDEN: int = 512
# The frames' 0..255 values to [0, 1], applied to the first convolution's weights (trunk).
_INPUT_SCALE: float = 1.0 / 255.0


def _conv(in_channels: int, out_channels: int, kernel: int, stride: int) -> list[nn.Module]:
    # bias=False: the following BatchNorm's shift makes a conv bias redundant.
    return [
        nn.Conv2d(in_channels, out_channels, kernel_size=kernel, stride=stride, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    ]


class QNetwork(nn.Module):
    """Nature-CNN Q-network with BatchNorm; maps uint8 frame stacks to Q-values.

    Args:
        num_actions: size of the discrete action set (output width).
        frame_stack: number of stacked 84x84 grayscale frames (input channels).
        quantiles: 0 for Q-values, N > 1 for N quantiles of the return per action (QR-DQN).
        channels_last: run the conv trunk on channels_last activations. Faster for
            training-size batches on oneDNN CPUs (measured on a 2-core Zen 4: fp32 eager
            updates ~9%, compiled bf16 updates ~7% faster) but ~60% slower for batch-1
            inference, so the learner turns it on and acting copies leave it off. Only
            activations change layout; the weights (and so state_dicts) stay contiguous.
    """

    def __init__(
        self,
        num_actions: int,
        frame_stack: int = 4,
        *,
        quantiles: int = 0,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        if frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        if quantiles < 0 or quantiles == 1:
            raise ValueError(f"quantiles must be 0 (Q-values) or >= 2, got {quantiles}")
        self.num_actions = num_actions
        self.frame_stack = frame_stack
        self.quantiles = quantiles
        self.channels_last = channels_last

        self.features = nn.Sequential(
            *_conv(frame_stack, 32, 8, 4),
            *_conv(32, 64, 4, 2),
            *_conv(64, 64, 3, 1),
            nn.Flatten(),
        )
        self.fc = nn.Sequential(nn.Linear(_TRUNK_OUT_FEATURES, _HIDDEN), nn.ReLU(inplace=True))
        per_action = max(quantiles, 1)  # outputs per action: one Q-value or N quantiles
        self.value = nn.Linear(_HIDDEN, per_action)
        self.advantage = nn.Linear(_HIDDEN, num_actions * per_action)
        self._init_weights()

    def _init_weights(self) -> None:
        output_layers = {self.value, self.advantage}
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                # BN restores the forward scale anyway; fan_out keeps the backward signal well scaled.
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                # Output layers feed no ReLU, so they get the linear gain (1) not sqrt(2).
                gain_for = "linear" if module in output_layers else "relu"
                nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity=gain_for)
                nn.init.zeros_(module.bias)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, num_actions]`` for uint8 (or already-float 0..255) ``[B, S, 84, 84]``;
        with quantiles, the mean of each action's quantiles."""
        out = self._heads(obs)
        return out.mean(dim=2) if self.quantiles else out.squeeze(2)

    def quantile_values(self, obs: torch.Tensor) -> torch.Tensor:
        """The quantiles of the return ``[B, num_actions, quantiles]`` (QR-DQN networks only)."""
        if not self.quantiles:
            raise ValueError("quantile_values needs a network built with quantiles > 0")
        return self._heads(obs)

    def frames(self, obs: torch.Tensor) -> torch.Tensor:
        """The trunk's input: the frames' 0..255 values as float32 (as bf16 or fp16 under
        autocast, which holds every integer up to 256 exactly), in the trunk's layout.

        Idempotent, so a caller that runs several networks on the same states (the target
        and the Double-DQN argmax on ``s'``) converts them once and hands each network the
        result. The layout changes on the uint8 frames (a quarter of the bytes)."""
        if self.channels_last:
            obs = obs.contiguous(memory_format=torch.channels_last)
        device = obs.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else torch.float32
        return obs if obs.dtype == dtype else obs.to(dtype)

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        """The convolutional trunk's features ``[B, 3136]``: every BatchNorm layer of the
        network, and nothing after the last one. A re-estimate of the statistics runs this
        much and no more (:func:`~pipeline.learning.batchnorm_stats.recalibrate`): the fc
        layer and the heads are a fifth of a forward's arithmetic and change no statistic.

        The frames' scaling to [0, 1] is folded into the first convolution's weights:
        ``conv(x / 255, w) = conv(x, w / 255)``, equal within float rounding, and 8k weights
        are scaled instead of a batch's 900k pixels (with the layout change, the division
        of the frames was a sixth of a batch-32 forward). Under autocast the frames reach
        the convolution exactly, as the integers they are. Out-of-place: a float input
        must not change under the caller."""
        layers = iter(self.features)
        first = next(layers)
        x = F.conv2d(self.frames(obs), first.weight * _INPUT_SCALE, None, first.stride)
        for layer in layers:
            x = layer(x)
        return x

    def _heads(self, obs: torch.Tensor) -> torch.Tensor:
        """The output layers' values ``[B, num_actions, max(quantiles, 1)]`` in fp32."""
        h = self.fc(self.trunk(obs))
        # The output layers run in fp32 even under autocast: Q-values are tens (66 on 1-1 at
        # 1.5M frames) while the gaps between actions that decide the greedy action are
        # tenths, and bf16's 8-bit mantissa rounds to 0.25 between 32 and 64. In bf16 a third
        # of replay states had a tied best action and the argmax disagreed with fp32's on 15 %
        # (docs/learning-history.md). The heads are 512 x (1 + num_actions) MACs: nothing to save.
        per_action = max(self.quantiles, 1)
        with torch.autocast(device_type=h.device.type, enabled=False):
            h = h.float()
            value = self.value(h).view(-1, 1, per_action)
            advantage = self.advantage(h).view(-1, self.num_actions, per_action)
            # Subtracting the mean advantage makes V/A identifiable (Wang et al. 2016, eq. 9).
            return value + advantage - advantage.mean(dim=1, keepdim=True)


def build_qnetwork(num_actions: int, frame_stack: int = 4, quantiles: int = 0) -> QNetwork:
    """A fresh CPU ``QNetwork`` in eval mode, for a collector's acting copy.

    Collectors only run inference with weights published by the learner, so the copy
    starts in eval mode (BatchNorm uses the published running statistics) and has
    ``requires_grad`` switched off so no autograd bookkeeping is done while acting.
    It keeps the default NCHW activations, which are faster for batch-1 inference.
    """
    net = QNetwork(num_actions, frame_stack=frame_stack, quantiles=quantiles)
    net.eval()
    net.requires_grad_(False)
    return net

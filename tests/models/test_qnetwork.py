"""Tests for models.qnetwork: shapes, dtypes, BatchNorm layout, heads and state_dict."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from models import QNetwork, build_qnetwork


def _obs(batch: int = 2, stack: int = 4, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, stack, 84, 84), dtype=torch.uint8, generator=gen)


def test_output_shape_and_dtype() -> None:
    net = QNetwork(num_actions=7, frame_stack=4)
    q = net(_obs(batch=3))
    assert q.shape == (3, 7)
    assert q.dtype == torch.float32
    assert torch.isfinite(q).all()


def test_uint8_input_is_scaled_inside_forward() -> None:
    net = QNetwork(5).eval()
    obs = _obs()
    with torch.no_grad():
        from_uint8 = net(obs)
        # A float input holding the same 0..255 values must give the same result, and
        # must not be modified in place by the scaling.
        as_float = obs.float()
        before = as_float.clone()
        from_float = net(as_float)
    torch.testing.assert_close(from_uint8, from_float)
    assert torch.equal(as_float, before)


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
def test_the_scale_in_the_first_weights_is_the_scaled_input_within_rounding(channels_last: bool, train: bool) -> None:
    """conv(x, w / 255) is conv(x / 255, w), the computation it replaced, within float32
    rounding: the trunk's features and the Q-values agree to a few ulps, in train mode
    (batch statistics) and in eval mode (running statistics)."""
    torch.manual_seed(0)
    net = QNetwork(5, channels_last=channels_last).train(train)
    obs = _obs(batch=8)
    old_input = obs.float() / 255.0
    with torch.no_grad():
        new_features = net.trunk(obs)
        old_features = net.features(old_input)
    torch.testing.assert_close(new_features, old_features, rtol=1e-5, atol=1e-5)
    assert (new_features - old_features).abs().max() < 1e-4 * old_features.abs().max()


def test_the_frames_reach_a_low_precision_convolution_exactly() -> None:
    """Under bf16 autocast the trunk's input is the frames' integers in bf16, every one of
    them exact, and the trunk is closer to float64's than bf16 of the scaled frames is."""
    torch.manual_seed(0)
    net = QNetwork(5, channels_last=True).eval()
    obs = _obs(batch=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        frames = net.frames(obs)
        folded = net.trunk(obs).double()
        scaled = net.features(obs.float() / 255.0).double()
    assert frames.dtype == torch.bfloat16
    assert torch.equal(frames.double(), obs.double())
    with torch.no_grad():
        exact = net.double().features(obs.double() / 255.0)
    assert (folded - exact).abs().mean() <= (scaled - exact).abs().mean()
    assert (folded - exact).abs().max() < 0.05 * exact.abs().max()


@pytest.mark.parametrize("train", [False, True])
def test_channels_last_is_only_a_layout_change(train: bool) -> None:
    torch.manual_seed(0)
    default = QNetwork(5).train(train)
    fast = QNetwork(5, channels_last=True).train(train)
    fast.load_state_dict(default.state_dict())
    obs = _obs(batch=4)
    torch.testing.assert_close(fast(obs), default(obs), rtol=1e-4, atol=1e-5)
    assert all(t.is_contiguous() for t in fast.state_dict().values())


def test_other_frame_stack() -> None:
    net = QNetwork(num_actions=3, frame_stack=2)
    assert net(_obs(batch=2, stack=2)).shape == (2, 3)


def test_batchnorm_after_each_conv_and_convs_have_no_bias() -> None:
    net = QNetwork(7)
    layers = list(net.features)
    convs = [i for i, layer in enumerate(layers) if isinstance(layer, nn.Conv2d)]
    assert len(convs) == 3
    for i in convs:
        conv, bn = layers[i], layers[i + 1]
        assert conv.bias is None
        assert isinstance(bn, nn.BatchNorm2d)
        assert bn.num_features == conv.out_channels
        assert isinstance(layers[i + 2], nn.ReLU)
    shapes = [(layers[i].out_channels, layers[i].kernel_size, layers[i].stride) for i in convs]
    assert shapes == [(32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)), (64, (3, 3), (1, 1))]
    assert net.fc[0].in_features == 3136 and net.fc[0].out_features == 512


def test_the_head_is_dueling() -> None:
    dueling = QNetwork(6)
    assert hasattr(dueling, "value") and hasattr(dueling, "advantage")
    assert not hasattr(dueling, "head")
    assert dueling.value.out_features == 1 and dueling.advantage.out_features == 6

    # The dueling output is V + A - mean(A): check against the head outputs directly.
    dueling.eval()
    obs = _obs(batch=4)
    with torch.no_grad():
        hidden = dueling.fc(dueling.features(obs.float() / 255.0))
        value, adv = dueling.value(hidden), dueling.advantage(hidden)
        expected = value + adv - adv.mean(dim=1, keepdim=True)
        torch.testing.assert_close(dueling(obs), expected)


def test_state_dict_includes_batchnorm_buffers() -> None:
    state = QNetwork(7).state_dict()
    for index in (1, 4, 7):  # BatchNorm positions inside `features`
        for buffer in ("running_mean", "running_var", "num_batches_tracked"):
            assert f"features.{index}.{buffer}" in state
    assert not any(key.endswith(".bias") and key.startswith("features.0") for key in state)


def test_train_mode_updates_running_stats() -> None:
    net = QNetwork(4).train()
    before = net.features[1].running_mean.clone()
    net(_obs(batch=4))
    assert not torch.equal(before, net.features[1].running_mean)
    assert int(net.features[1].num_batches_tracked) == 1


def test_build_qnetwork_is_inference_ready() -> None:
    net = build_qnetwork(5, frame_stack=4)
    assert isinstance(net, QNetwork)
    assert not net.training
    assert not any(p.requires_grad for p in net.parameters())
    assert next(net.parameters()).device.type == "cpu"
    assert net(_obs()).shape == (2, 5)


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        QNetwork(0)
    with pytest.raises(ValueError):
        QNetwork(3, frame_stack=0)
    for quantiles in (-1, 1):
        with pytest.raises(ValueError, match="quantiles"):
            QNetwork(3, quantiles=quantiles)


def test_quantile_heads_give_n_values_per_action_and_q_is_their_mean() -> None:
    net = QNetwork(6, quantiles=8).eval()
    obs = _obs(batch=3)
    with torch.no_grad():
        quantiles = net.quantile_values(obs)
        q = net(obs)
    assert quantiles.shape == (3, 6, 8) and quantiles.dtype == torch.float32
    torch.testing.assert_close(q, quantiles.mean(dim=2))
    # Dueling per quantile: each quantile is V_i + A_i(a) - mean_a A_i(a).
    with torch.no_grad():
        hidden = net.fc(net.features(obs.float() / 255.0))
        value = net.value(hidden).view(3, 1, 8)
        adv = net.advantage(hidden).view(3, 6, 8)
    torch.testing.assert_close(quantiles, value + adv - adv.mean(dim=1, keepdim=True))


def test_a_q_value_network_keeps_its_shapes_and_has_no_quantiles() -> None:
    """Without quantiles the heads are the ones every saved network has (so marks,
    checkpoints and the shipped agent load), and asking it for quantiles is an error."""
    shapes = {name: tuple(t.shape) for name, t in QNetwork(5).state_dict().items()}
    assert shapes["value.weight"] == (1, 512) and shapes["advantage.weight"] == (5, 512)
    assert shapes["value.bias"] == (1,) and shapes["advantage.bias"] == (5,)
    with pytest.raises(ValueError, match="quantiles > 0"):
        QNetwork(5).quantile_values(_obs())


def test_heads_keep_small_action_gaps_under_bf16_autocast() -> None:
    """Q-values of tens with gaps of tenths (a trained Mario network's): bf16 rounds 60 to a
    step of 0.25, so the output layers must run in fp32 for the argmax to see the gaps."""
    net = QNetwork(num_actions=7).eval()
    gaps = torch.linspace(0.0, 0.3, 7)  # 0.05 apart: below bf16's resolution at 60
    with torch.no_grad():
        net.value.bias.add_(60.0)
        net.advantage.bias.copy_(gaps)
        obs = _obs(batch=4)
        full = net(obs)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = net(obs)
    assert mixed.dtype == torch.float32
    # The trunk's bf16 rounding moves every action's Q alike; the gaps between them stay.
    assert torch.equal(mixed.argmax(dim=1), full.argmax(dim=1))
    assert (mixed.diff(dim=1) - full.diff(dim=1)).abs().max() < 0.01

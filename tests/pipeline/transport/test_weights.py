"""The double-buffered weights block: torn-copy freedom under concurrent readers, state
round trips (BatchNorm statistics included), and the header fields."""

from __future__ import annotations

import multiprocessing as mp
import queue

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.learning.flat_state import StateLoader, flatten_state, state_numel
from pipeline.transport import weights as W
from pipeline.transport.segments import attach_segment, create_segment, release, segment_name
from tests.pipeline import producers as P

TAG = P.new_tag("weights")
CTX = mp.get_context("spawn")


@pytest.fixture
def block_factory():
    """Create weights blocks on fresh segments; unlink all of them afterwards."""
    made = []

    def make(num_floats: int, kind: str = "weights"):
        segment = create_segment(segment_name(TAG, f"{kind}{len(made)}"), W.block_bytes(num_floats))
        made.append(segment)
        return segment, W.WeightsBlock.initialise(segment.buf, num_floats)

    yield make
    for segment in made:
        release(segment, unlink=True)


# ------------------------------------------------------------------------ concurrent readers
@pytest.mark.timeout(750)
def test_readers_never_see_a_torn_copy(block_factory):
    num_floats, subscribers, reads = 1_500_000, 2, 4000
    segment, block = block_factory(num_floats)
    results = CTX.Queue()
    procs = [CTX.Process(target=P.weights_subscriber, args=(segment.name, reads, results)) for _ in range(subscribers)]
    flat = np.empty(num_floats, np.float32)
    version = 0
    try:
        for p in procs:
            p.start()
        reports = []
        # Publish as fast as possible until every subscriber has done its reads.
        while len(reports) < subscribers:
            version += 1
            flat.fill(version)
            assert block.publish(flat, learner_step=version, epsilon=1.0 / version) == version
            if version % 8 == 0:
                try:
                    reports.append(results.get_nowait())
                except queue.Empty:
                    assert any(p.is_alive() for p in procs) or not results.empty(), "a subscriber died"
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    finally:
        P.kill_all(procs)
        block.close()
    assert version == block_version_after(segment)
    for report in reports:
        assert report["reads"] == reads
        assert report["bad"] == 0, f"torn or mislabelled copy: {report['first_bad']}"
        assert report["backwards"] == 0, "a reader saw the version go backwards"
        assert 1 <= report["last"] <= version
        # The publisher really ran while this reader copied.
        assert report["distinct"] > 1
    print(f"published {version} versions; reports {reports}")


def block_version_after(segment) -> int:
    block = W.WeightsBlock(segment.buf)
    try:
        return block.version
    finally:
        block.close()


def test_read_retries_while_the_writer_reuses_the_buffer(block_factory):
    """The 'version moved by two' rule, driven by hand: a copy of version v is rejected
    once the writer has announced publish v + 2 (which overwrites buffer v % 2)."""
    _, block = block_factory(16)
    out = np.empty(16, np.float32)
    assert block.read(out) == 0  # nothing published yet
    for v in (1, 2):
        block.publish(np.full(16, v, np.float32))
    assert block.read(out) == 2 and (out == 2).all()
    block._words[W.WRITING] = 3  # publish 3 in progress: it writes buffer 1, not ours
    assert block.read(out) == 2 and (out == 2).all()
    block._words[W.WRITING] = 4  # publish 4 would overwrite buffer 0 = version 2's buffer
    with pytest.raises(RuntimeError):
        block.read(out, max_attempts=3)
    block._words[W.WRITING] = 2
    block.close()


def test_a_hold_holds_once_the_published_frames_reach_it(block_factory):
    """The evaluator's hold on the collectors: none while 0, then from its frames on."""
    _, block = block_factory(4)
    block.publish(np.zeros(4, np.float32), frames=5_000)
    assert block.hold_frames == 0 and not block.held  # 0: no hold, however far the run is
    block.hold_frames = 6_000
    assert not block.held
    block.publish(np.zeros(4, np.float32), frames=6_000)
    assert block.held
    block.hold_frames = -3  # never negative: a bad value lifts the hold
    assert block.hold_frames == 0 and not block.held
    assert block.num_floats == 4 and block.version == 2  # the header words beside it are untouched
    block.close()


# ------------------------------------------------------------------------ state round trip
class BNNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.bn2 = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.bn1 = nn.BatchNorm1d(5)
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        x = torch.relu(self.bn2(self.conv(x)))
        return self.head(torch.relu(self.bn1(self.fc(x.flatten(1)))))


def test_state_round_trip_keeps_batchnorm_statistics(block_factory):
    torch.manual_seed(0)
    source = BNNet()
    optimiser = torch.optim.SGD(source.parameters(), lr=0.1)
    source.train()
    for _ in range(3):  # move weights, running_mean/var and num_batches_tracked off their init
        loss = source(torch.randn(8, 2, 8, 8)).pow(2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    state = source.state_dict()
    assert int(state["bn2.num_batches_tracked"]) == 3
    assert not torch.equal(state["bn1.running_var"], torch.ones(5))

    flat = flatten_state(state)
    assert flat.dtype == np.float32 and flat.size == state_numel(state)
    segment, block = block_factory(state_numel(state))
    assert block.publish(flat, learner_step=7, epsilon=0.25) == 1

    torch.manual_seed(1)
    target = BNNet()
    assert not torch.equal(target.conv.weight, source.conv.weight)
    param_ptrs = {name: p.data_ptr() for name, p in target.named_parameters()}
    loader = StateLoader(target)
    assert loader.num_floats == block.num_floats
    # A subscriber on its own mapping of the segment, like a collector.
    other_segment = attach_segment(segment.name)
    try:
        subscriber = W.WeightsBlock(other_segment.buf)
        assert subscriber.read(loader.staging) == 1
        loader.load()
        subscriber.close()
    finally:
        release(other_segment, unlink=False)

    loaded = target.state_dict()
    assert list(loaded) == list(state)
    for name, tensor in state.items():
        assert loaded[name].dtype == tensor.dtype, name
        assert torch.equal(loaded[name], tensor), name
    assert loaded["bn1.num_batches_tracked"].dtype == torch.int64
    # Loaded in place into the module's own tensors.
    assert {name: p.data_ptr() for name, p in target.named_parameters()} == param_ptrs
    source.eval()
    target.eval()
    x = torch.randn(4, 2, 8, 8)
    assert torch.equal(source(x), target(x))
    # load() also takes an explicit vector.
    target.bn2.running_mean.fill_(9.0)
    loader.load(flat)
    assert torch.equal(target.bn2.running_mean, source.bn2.running_mean)
    block.close()


# ------------------------------------------------------------------------ header fields
def test_header_fields_round_trip_between_mappings(block_factory):
    segment, block = block_factory(8)
    other_segment = attach_segment(segment.name)
    other = W.WeightsBlock(other_segment.buf)
    try:
        assert other.num_floats == 8
        assert (other.version, other.learner_step, other.stop_requested) == (0, 0, False)
        block.epsilon = 0.125
        assert other.epsilon == 0.125
        assert block.publish(np.arange(8, dtype=np.float32), learner_step=12345, epsilon=0.05) == 1
        assert (other.version, other.learner_step, other.epsilon) == (1, 12345, 0.05)
        out = np.empty(8, np.float32)
        assert other.read(out) == 1 and out.tolist() == list(range(8))
        # Fields left out of a publish keep their values.
        assert block.publish(np.zeros(8, np.float32)) == 2
        assert (other.learner_step, other.epsilon) == (12345, 0.05)
        assert not other.stop_requested
        block.request_stop()
        assert other.stop_requested and block.stop_requested
        with pytest.raises(ValueError):
            block.publish(np.zeros(7, np.float32))
        assert other.version == 2
    finally:
        other.close()
        block.close()
        release(other_segment, unlink=False)

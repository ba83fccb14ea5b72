"""Shared test helpers: waiting on a condition, running main.py, and the shared-memory leak check.

Every test module runs under :func:`_no_leaked_segments`: a segment of this project that
appears in /dev/shm while a module runs and is still there when it ends fails the module.
The test process itself runs torch on one thread (:func:`_one_torch_thread`), its global
generator seeded before every test (:func:`_seeded_torch`).

``make test`` runs the suite on one pytest-xdist worker per core this process may use
(:func:`pytest_xdist_auto_num_workers`). Each worker's segments get a prefix of their own
(``MARIO_SEGMENT_PREFIX``, set below before anything reads it), so the workers are as
apart as two machines: a run's start in one never removes what a fault test in the other
left on purpose, and each worker's leak check sees its own segments only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

if _worker := os.environ.get("PYTEST_XDIST_WORKER"):  # gw0, gw1, ...
    os.environ["MARIO_SEGMENT_PREFIX"] = f"mario{_worker}_"

import psutil
import pytest

from pipeline.transport.segments import owner_pid, project_segments


def wait_until(
    predicate: Callable[[], object],
    timeout_s: float,
    what: str = "the condition",
    poll_s: float = 0.05,
    proc: subprocess.Popen[str] | None = None,
) -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout_s`` (a safety net, not a budget).

    With ``proc``, fail at once (with its output) if that process exits first.
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if proc is not None and proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"process exited early ({proc.returncode}) waiting for {what}:\n{output}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)


def run_main(
    args: list[str], *, cwd: os.PathLike[str] | str, timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python main.py ARGS`` to its end (in ``env``, else this process's environment);
    output captured as text.

    Past ``timeout_s`` (a safety net, not a budget) the run gets Ctrl-C first, as a user
    would give it, so it stops its collectors (or node agents) and unlinks its segments
    before the test fails; it is killed only if it has not stopped a minute later.
    """
    proc = subprocess.Popen(
        [sys.executable, "main.py", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        timed_out = f"main.py {' '.join(args)} ran past {timeout_s} s; stopped. Last output:\n{stderr[-3000:]}"
        raise AssertionError(timed_out) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with the most ``slow`` tests first, each module's tests in their own order.

    The longest job first is how a few workers finish together: a worker that picks up a
    module of whole training runs at the end of the suite would run alone for minutes
    while the other idles. Within a module, and among modules with no slow test, the order
    is the file order, as in a run without xdist.
    """
    slow_tests = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow_tests[item.path])


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core this process may use (so one under ``taskset -c 0``);
    xdist's own count is of the machine's cores, whatever the affinity."""
    return len(os.sched_getaffinity(0))


def _leaked_by_us(name: str) -> bool:
    """A segment this test process (or a process it started) owns, or whose owner is gone.

    A segment owned by a live process outside this process tree is another run's (a run
    on the same machine beside the suite), not a leak of the module under test.
    """
    pid = owner_pid(name)
    if pid is None or pid == os.getpid():
        return True
    try:
        owner = psutil.Process(pid)
        return owner.status() == psutil.STATUS_ZOMBIE or os.getpid() in {p.pid for p in owner.parents()}
    except psutil.NoSuchProcess:
        return True


@pytest.fixture(autouse=True)
def _one_torch_thread() -> None:
    """The tests' own torch work (small batches, batch-1 forwards) on one thread.

    Beside anything else busy, two intra-op threads wait on each other: the learner tests
    ran 2-4 times slower with two than with one beside training runs. Set before every
    test, as code run in this process may set its own (a run's start-up does); the
    processes the tests start (main.py, collectors) set theirs as a run does.
    """
    torch = sys.modules.get("torch")  # collection imported it if any test module uses it
    if torch is not None:
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seeded_torch() -> None:
    """Torch's global generator seeded before every test.

    A network built without a seed of its own then starts from the same weights whatever
    ran before it on the same pytest-xdist worker, so a test's outcome never depends on
    how the suite was split between workers.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)


@pytest.fixture(scope="module", autouse=True)
def _no_leaked_segments():
    """Fail the module if it leaves a project segment in /dev/shm that was not there before."""
    before = set(project_segments())
    yield
    left = sorted(name for name in set(project_segments()) - before if _leaked_by_us(name))
    assert not left, f"shared-memory segments left behind: {left}"

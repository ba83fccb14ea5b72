"""Writes that fail while a run goes on: each kind reported once, none fatal to the run.

A periodic checkpoint, a frame mark or a metrics row that cannot be written (a full
disk, a lost mount, a permission changed under the run) must not stop training, its
supervision or its stop conditions: the run goes on, and its last good checkpoint stays
the one to resume from. :class:`WriteFailures` says so once per kind of write (what
failed, where, and the free space there), stays quiet while the same kind keeps
failing, and says so again when a write of that kind succeeds.

Every file written this way is written atomically (:mod:`pipeline.common.files`): a
failed write leaves the previous file and no partial one.

TensorBoard writes its event file from a thread of its own, which dies of a full disk
with a traceback; :meth:`WriteFailures.writer_threads` turns that into the same one
report as a metrics.csv row that could not be written.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger("mario.trainer")

MB = 2**20
_REASON_LIMIT = 200


def free_space(directory: Path) -> str:
    """``"3.1 MB free on DIR"``, or that it is unknown (the directory itself may be gone)."""
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return f"free space on {directory} unknown"
    return f"{free / MB:,.1f} MB free on {directory}"


def short_reason(exc: BaseException) -> str:
    """What went wrong, in one short line: the root cause a wrapper names (torch's zip writer
    says "unexpected pos 704 vs 598" for a full disk), else the exception itself."""
    cause = exc.__cause__ or exc
    text = " ".join(f"{type(cause).__name__}: {cause}".split())
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 3] + "..."


class WriteFailures:
    """The kinds of write that are failing now; each reported once until it succeeds again."""

    def __init__(self) -> None:
        self.failing: dict[str, int] = {}  # kind -> failures in a row
        self.reports = 0  # warnings logged (tests count them)

    def failed(self, kind: str, message: str) -> None:
        """A write of ``kind`` failed: ``message`` (what, where, free space) is logged the
        first time; later failures of the same kind only count."""
        count = self.failing.get(kind, 0) + 1
        self.failing[kind] = count
        if count == 1:
            self.reports += 1
            logger.warning(message)
        else:
            logger.debug("%s failed again (%d in a row)", kind, count)

    def metrics_failed(self, root: Path, exc: BaseException) -> None:
        """The monitor's metrics.csv row or TensorBoard events could not be written."""
        where = free_space(root)
        self.failed(
            "metrics",
            f"metrics (metrics.csv, TensorBoard) not written ({short_reason(exc)}; {where}); training goes on",
        )

    def succeeded(self, kind: str, what: str) -> None:
        """A write of ``kind`` worked: after failures, the recovery is said once."""
        count = self.failing.pop(kind, 0)
        if count:
            logger.info("%s written again (%s) after %d failed attempt(s)", kind, what, count)

    @contextlib.contextmanager
    def writer_threads(self, root: Path) -> Iterator[None]:
        """While it lasts, an OSError that ends a TensorBoard writer thread is reported as a
        failed metrics write (once), not printed as a traceback; other threads' errors go
        to the hook that was there before."""
        previous = threading.excepthook

        def hook(args: threading.ExceptHookArgs) -> None:
            thread_module = type(args.thread).__module__ if args.thread is not None else ""
            if thread_module.startswith("tensorboard") and isinstance(args.exc_value, OSError):
                self.metrics_failed(root, args.exc_value)
                return
            previous(args)

        threading.excepthook = hook
        try:
            yield
        finally:
            threading.excepthook = previous

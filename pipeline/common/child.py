"""How the project starts its child processes, and a child that replies over a pipe.

Every child process (collectors, the evaluator, the bench's and tune's measurements)
starts from :func:`process_context`: a fork server that imported numpy and torch once.
A child is forked from that server, so it starts with those imports done and nothing
else of the parent: no threads, no open segments, no state. (``spawn`` gave the same
clean start at the price of importing torch again in every child: a child that imports
what a collector does used 2.2-2.5 s of CPU to be ready under ``spawn`` and 0.3 s from the
server, whose own start, once per process, costs about one ``spawn``; side by side on a
2-core AMD EPYC Zen 3. A collector's restart and a run's start-up wait that much less.)
:class:`ParentWatch` is how such a child tells that the process that started it is gone.

The bench runs each measurement that must not share the parent's state (an env
worker, the learner timing, a whole Trainer run) in a process of its own.
:class:`Child` is the parent's handle on such a process: it starts the target,
:meth:`Child.receive` waits for its next reply with a deadline, and :meth:`Child.close`
joins it, then SIGTERMs and SIGKILLs one that will not end. :func:`run_in_child` is
the one-reply case.

In the child the target runs as ``target(conn, *args)`` and answers with
``conn.send(...)``, once or (for a worker that takes requests) once per request. If it
raises, the helper sends the traceback in its place and the parent's
:meth:`Child.receive` raises :class:`ChildError`, so every child's failure reaches the
parent in the same form.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.context
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

# How often a long wait looks up from the pipe to check that the child still lives: a
# child that dies without closing its end (killed by the OOM killer, say) is noticed
# within this, not at the deadline.
POLL_S = 0.5
KILL_JOIN_S = 5.0  # after SIGKILL the kernel only has to reap it


# Imported once in the fork server, so that no child imports them again: the two
# libraries every child of the project uses and that cost most to import.
PRELOAD = ("numpy", "torch")


def process_context() -> multiprocessing.context.BaseContext:
    """The start method of every child process: the fork server, with :data:`PRELOAD` imported.

    The server is started by the first child's start and serves every later one of this
    process (one server per process: a child that starts children has its own). A child's
    environment is the server's, the parent's as it was at that first start: a child sets
    what it needs itself (its torch threads, say) instead of reading variables the
    parent sets later.
    """
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


# How often a child looks at its parent's state: the checks run in the collectors' step
# loop, and a stop half a second after the learner died costs nothing.
PARENT_CHECK_S = 0.5


def process_state(pid: int) -> str | None:
    """``pid``'s state letter from /proc (``R``, ``S``, ``Z`` for a zombie, ...), or None if
    there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # "pid (comm) state ...": comm may hold spaces and parentheses; the last ")" ends it.
            return stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def process_gone(pid: int) -> bool:
    """Whether ``pid`` is gone: no such process, or a dead one its parent has not reaped yet
    (a zombie keeps its pid but will never act again)."""
    return process_state(pid) in (None, "Z", "X")


class ParentWatch:
    """In a child process: whether the process that started it, ``parent_pid``, is gone.

    Not by the child's own parent (``getppid``), as with ``spawn``: that is the fork server
    of :func:`process_context`, which every child of it keeps alive (they hold its
    "alive" pipe), so it outlives a killed learner. So the watch reads ``parent_pid``'s
    state, at most every :data:`PARENT_CHECK_S`: gone is no such process, or a zombie
    (dead, not yet reaped by its own parent).
    """

    def __init__(self, parent_pid: int) -> None:
        self.parent_pid = parent_pid
        self._gone = False
        self._next_check = 0.0

    def gone(self) -> bool:
        now = time.monotonic()
        if not self._gone and now >= self._next_check:
            self._next_check = now + PARENT_CHECK_S
            self._gone = process_gone(self.parent_pid)
        return self._gone


def qualified_name(exc_type: type[BaseException]) -> str:
    """``module.QualName`` of an exception class: how a child's error names its type."""
    return f"{exc_type.__module__}.{exc_type.__qualname__}"


class ChildError(RuntimeError):
    """The child's target raised; ``traceback`` is the child's, ``message`` its ``str(exc)``."""

    def __init__(self, name: str, type_names: tuple[str, ...], message: str, traceback_text: str) -> None:
        lines = traceback_text.strip().splitlines()
        self.last_line = lines[-1] if lines else type_names[0]  # "ValueError: boom"
        super().__init__(f"{name}: {self.last_line}")
        self.type_names = type_names  # the exception's class and its bases, qualified
        self.message = message
        self.traceback = traceback_text

    def raised(self, exc_type: type[BaseException]) -> bool:
        """Whether the child raised ``exc_type`` (or a subclass), compared by qualified name
        (the exception object itself stays in the child: it need not be picklable)."""
        return qualified_name(exc_type) in self.type_names


class ChildTimeout(RuntimeError):
    """No reply within the time given to :meth:`Child.receive`."""


class ChildExited(RuntimeError):
    """The child ended without replying; ``exitcode`` as :class:`multiprocessing.Process` has it."""

    def __init__(self, message: str, exitcode: int | None) -> None:
        super().__init__(message)
        self.exitcode = exitcode


@dataclass(frozen=True)
class _Failure:
    """What the child sends instead of a reply when its target raises."""

    type_names: tuple[str, ...]
    message: str
    traceback: str


def stop_fork_server() -> None:
    """Stop this process's fork server, if it started one, and wait for it.

    The children a process starts are the server's children, reaped by it; their CPU time
    reaches this process's ``children_*`` times only once this process waits for the
    server. Left running, the server outlives its client, ends an orphan and takes that
    time with it, so a parent measuring what its process tree used
    (:class:`pipeline.run.machine.load.LoadMeter`) counted a bench Trainer's collectors as
    "other processes" on a quiet machine (0.98 of 2 cores). The standard library stops
    the server only in its own tests (``ForkServer._stop``); where that is missing, the
    server is left as before.
    """
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


def _child_main(conn: Connection, target: Callable[..., object], args: tuple[Any, ...]) -> None:
    """The child's entry point: run ``target(conn, *args)``, sending its exception if it
    raises; then stop the fork server it may have started (:func:`stop_fork_server`)."""
    try:
        target(conn, *args)
    except BaseException as exc:  # noqa: BLE001 - whatever ended the target, the parent reports it
        names = tuple(qualified_name(t) for t in type(exc).__mro__ if issubclass(t, BaseException))
        try:
            conn.send(_Failure(names, str(exc), traceback.format_exc()))
        except (OSError, ValueError):
            pass  # the parent has gone or closed its end: nobody is left to tell
    finally:
        conn.close()
        stop_fork_server()


class Child:
    """A child process running ``target(conn, *args)`` and the parent's end of its pipe.

    ``target`` must be a module-level function (the start pickles it by name). ``daemon``
    children die with the parent; a child that starts processes itself (a Trainer starts
    collectors) must not be a daemon.
    """

    def __init__(
        self, target: Callable[..., object], args: tuple[Any, ...] = (), *, name: str, daemon: bool = True
    ) -> None:
        ctx = process_context()
        self.name = name
        self.conn, child_end = ctx.Pipe()
        self.process = ctx.Process(target=_child_main, args=(child_end, target, args), name=name, daemon=daemon)
        try:
            self.process.start()
        except BaseException:
            self.conn.close()
            raise
        finally:
            # Only the child holds its end now, so the child's exit reads as EOF here.
            child_end.close()

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode

    def send(self, message: Any) -> None:
        """Send a request to a child that takes them."""
        self.conn.send(message)

    def receive(self, timeout_s: float, *, through_interrupt: bool = False) -> Any:
        """The child's next reply, waiting at most ``timeout_s`` seconds.

        Raises :class:`ChildError` if the target raised, :class:`ChildExited` if the child
        ended without a reply, :class:`ChildTimeout` at the deadline. With
        ``through_interrupt``, a Ctrl-C in the parent does not cut the wait short: the
        child is in the same process group and got the same SIGINT, so the parent waits
        for it to wind up (a Trainer stops its collectors and releases its shared
        memory), then raises KeyboardInterrupt whatever the child answered.
        """
        deadline = time.monotonic() + timeout_s
        interrupted = False
        while True:
            try:
                message = self._next(deadline)
                break
            except KeyboardInterrupt:
                if not through_interrupt:
                    raise
                interrupted = True
            except (ChildError, ChildExited, ChildTimeout):
                if interrupted:
                    raise KeyboardInterrupt from None
                raise
        if interrupted:
            raise KeyboardInterrupt
        return message

    def _next(self, deadline: float) -> Any:
        while True:
            left = deadline - time.monotonic()
            # poll() is also true at EOF (the child has exited), where recv() raises.
            if self.conn.poll(max(0.0, min(POLL_S, left))):
                try:
                    message = self.conn.recv()
                except EOFError:
                    raise self._exited() from None
                break
            if not self.process.is_alive() and not self.conn.poll(0):  # a reply sent just before
                raise self._exited()  # exiting is still read by the next poll
            if left <= 0:
                raise ChildTimeout(f"{self.name}: no reply by the deadline")
        if isinstance(message, _Failure):
            raise ChildError(self.name, message.type_names, message.message, message.traceback)
        return message

    def _exited(self) -> ChildExited:
        self.process.join(1.0)  # reap it, so that exitcode is set
        return ChildExited(f"{self.name}: exited with code {self.exitcode} and no reply", self.exitcode)

    def close(self, join_s: float = 10.0, *, terminate_s: float = 0.0) -> None:
        """Wait up to ``join_s`` for the child to end; then, if ``terminate_s > 0``, SIGTERM it
        and wait that long (for a child that cleans up on SIGTERM, as a Trainer does); then
        SIGKILL it. Closes the pipe. Safe to call twice."""
        proc = self.process
        if proc.pid is not None:  # started
            proc.join(join_s)
            if terminate_s > 0 and proc.is_alive():
                proc.terminate()
                proc.join(terminate_s)
            if proc.is_alive():
                proc.kill()
                proc.join(KILL_JOIN_S)
        self.conn.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def run_in_child(
    target: Callable[..., object],
    args: tuple[Any, ...] = (),
    *,
    name: str,
    timeout_s: float,
    daemon: bool = True,
    join_s: float = 10.0,
) -> Any:
    """Start ``target(conn, *args)``, return its one reply, and join (or kill) the child.

    Raises as :meth:`Child.receive` does; the child is closed (``join_s``, then SIGKILL)
    whatever happens.
    """
    child = Child(target, args, name=name, daemon=daemon)
    try:
        return child.receive(timeout_s)
    finally:
        child.close(join_s)

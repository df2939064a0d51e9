"""One progress protocol for every call of the front door, and the adapters that feed it.

Why one: each job reports its progress its own way. The reindex polls the store for counts per
entity (:class:`~sparkindex.jobs.progress.ProgressListener`), verify counts key ranges as Spark
finishes them (:class:`~sparkindex.verify.verifier.VerifyProgress`), a re-drive counts dead
letters (a callback), a sync acknowledges batches (``on_ack``). A caller draws one kind of bar,
writes one kind of log line or feeds one metric whatever it runs: the adapters below translate
each job's callbacks into :class:`Progress`, here and nowhere else.

The order of calls is fixed: :meth:`Progress.started` once, then any number of
:meth:`~Progress.phase` and :meth:`~Progress.advanced`, then :meth:`~Progress.finished` exactly
once, also when the call raises (``FAILED``, or ``STOPPED`` for ``KeyboardInterrupt``), so a
display can always close itself. Calls may come from sparkindex's own threads (the reindex's
store poller, verify's Spark watcher) but never two at once: the adapter serialises them. A
progress method that raises is logged once and not called again for that call: watching a job
must never break it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from sparkindex.api.results import Outcome

if TYPE_CHECKING:
    from sparkindex.coordination.records import EntityStats

log = logging.getLogger("sparkindex.api")

#: the calls that report progress
CallName = Literal["reindex", "sync", "verify", "repair", "redrive", "apply_deferred", "scheduled_verify"]


@dataclass(frozen=True)
class Tally:
    """How far one part of a call has come: what a bar shows.

    A reindex has one per entity (alias), counting documents; verify one per pass, counting key
    ranges; a re-drive one, counting dead letters; a sync one per consumer group, counting
    changes applied, with no total (it streams for as long as it runs)."""

    #: what is counted, the same text each time for the same bar ("products", "verifying (source ranges)")
    task: str
    #: "documents", "ranges", "letters" or "changes"
    unit: str
    done: int
    #: None when not known
    total: int | None
    failed: int = 0
    #: a short note for a person, e.g. the reindex's partition states ("completed 3, pending 1")
    detail: str = ""


class Progress(Protocol):
    """What a caller implements to watch a call (see the module docstring for the order)."""

    def started(self, call: CallName, aliases: Sequence[str]) -> None:
        """The call begins (after the pipeline loaded, before its preflight)."""

    def phase(self, text: str) -> None:
        """A step begins ("planning partitions", "pass 2: 14 partitions on Spark"), or the
        preflight warns ("preflight: WARN ...")."""

    def advanced(self, tally: Tally) -> None:
        """A count moved."""

    def finished(self, outcome: Outcome) -> None:
        """The call ended; ``FAILED`` also when it raised (the exception follows)."""


class NoProgress:
    """A :class:`Progress` that shows nothing: subclass it to implement only what you need."""

    def started(self, call: CallName, aliases: Sequence[str]) -> None:
        return None

    def phase(self, text: str) -> None:
        return None

    def advanced(self, tally: Tally) -> None:
        return None

    def finished(self, outcome: Outcome) -> None:
        return None


class _HasOutcome(Protocol):
    @property
    def outcome(self) -> Outcome: ...


R = TypeVar("R", bound=_HasOutcome)


class Watch:
    """One call's side of the protocol: serialises the caller's progress, survives its errors,
    and hands each job the callbacks it knows. Without a progress, phases go to the log."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self._lock = threading.Lock()
        self.outcome = Outcome.DONE

    @property
    def watched(self) -> bool:
        return self._progress is not None

    def _send(self, send: Callable[[Progress], None], name: str) -> None:
        with self._lock:
            progress = self._progress
            if progress is None:
                return
            try:
                send(progress)
            except Exception:  # a display's bug must not end an index build: logged, then left out
                self._progress = None
                log.exception("progress.%s raised; no more progress is reported for this call", name)

    def phase(self, text: str) -> None:
        if self._progress is None:
            log.info("%s", text)
        self._send(lambda p: p.phase(text), "phase")

    def warn(self, text: str) -> None:
        """A warning for a person: the progress's phase when there is one, else the log's WARNING."""
        if self._progress is None:
            log.warning("%s", text)
        self._send(lambda p: p.phase(text), "phase")

    def advanced(self, tally: Tally) -> None:
        self._send(lambda p: p.advanced(tally), "advanced")

    def done(self, result: R) -> R:
        """*result*, its outcome noted for :meth:`Progress.finished`."""
        self.outcome = result.outcome
        return result

    # -- the jobs' own callbacks -------------------------------------------------------------------
    def reindex_listener(self) -> _ReindexListener:
        """For :class:`~sparkindex.jobs.reindex.ReindexJob` (a ProgressListener)."""
        return _ReindexListener(self)

    def verify_listener(self) -> _VerifyListener:
        """For :func:`~sparkindex.verify.run.run_verify` (a VerifyProgress)."""
        return _VerifyListener(self)

    def counter(self, task: str, unit: str) -> Callable[[int, int], None]:
        """A ``(done, total)`` callback: the re-drive's."""
        return lambda done, total: self.advanced(Tally(task, unit, done, total))


class _ReindexListener:
    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def phase(self, text: str) -> None:
        self.watch.phase(text)

    def stats(self, stats: Mapping[str, EntityStats]) -> None:
        for entity, s in stats.items():
            parts = ", ".join(f"{k.lower()} {v}" for k, v in sorted(s.partitions.items()))
            self.watch.advanced(Tally(entity, "documents", s.processed, max(s.total, s.processed), s.failed, parts))


class _VerifyListener:
    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def phase(self, text: str) -> None:
        self.watch.phase(text)

    def ranges(self, label: str, done: int, total: int) -> None:
        self.watch.advanced(Tally(label, "ranges", done, total))


@contextlib.contextmanager
def watching(progress: Progress | None, call: CallName, aliases: Sequence[str]) -> Iterator[Watch]:
    """``started`` now, ``finished`` when the block ends, however it ends (see the module docstring)."""
    watch = Watch(progress)
    watch._send(lambda p: p.started(call, tuple(aliases)), "started")
    try:
        yield watch
    except KeyboardInterrupt:
        watch._send(lambda p: p.finished(Outcome.STOPPED), "finished")
        raise
    except BaseException:
        watch._send(lambda p: p.finished(Outcome.FAILED), "finished")
        raise
    watch._send(lambda p: p.finished(watch.outcome), "finished")

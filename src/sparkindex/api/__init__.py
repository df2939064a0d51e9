"""sparkindex as a library: the one front door. The CLI's commands and the server are its clients.

    from sparkindex import api

    result = api.reindex("pipeline.yaml")
    if result.outcome is not api.Outcome.DONE:
        ...

**Calls.** Each takes the pipeline (a path, YAML text or a loaded ``Pipeline``) and returns a
frozen result with the fields of the command's ``--json`` (``to_dict()`` is that object where it
is more than the fields). Jobs: :func:`reindex`, :func:`sync`, :func:`verify`, :func:`repair`,
:func:`scheduled_verify`, :func:`redrive`, :func:`apply_deferred`; their results carry an
:class:`Outcome` (DONE, DONE_WITH_ERRORS, FAILED, STOPPED, with the CLI's ``exit_code``). Around
them: :func:`check`, :func:`status`, :func:`explain`, :func:`dead_letters`, :func:`gc`,
:func:`stop`, :func:`search`, :func:`drop_slot`, :func:`verify_due_at`, :func:`init` (a new
pipeline's text; writing the file is the caller's) and :func:`load`.

**Preflight.** The job calls run the checks of ``sparkindex check`` that their run needs first
(``preflight=False`` skips them): a failure a person must fix raises :class:`ConfigError` listing
the failed checks; warnings go to the progress as phases, or to the ``sparkindex.api`` log.

**Progress.** One protocol for every call, :class:`Progress`: ``started(call, aliases)``, then
``phase(text)`` and ``advanced(Tally)``, then ``finished(outcome)`` exactly once, also when the
call raises. See :mod:`sparkindex.api.progress`; :class:`NoProgress` is a base to subclass.

**Errors.** Everything sparkindex raises on purpose is a :class:`SparkIndexError` (its
``exit_code`` is the CLI's). What a scheduler should do with each:

* :class:`TransientError`: **retry**, with backoff. A server did not answer, or was overloaded
  for too long; a rerun resumes where the run stopped (the reindex job, the sync's acknowledged offsets).
* :class:`LockHeld`: **retry later** (or skip this turn): another live process runs these
  aliases, or this consumer group's sync; nothing is wrong with the input.
* :class:`ConfigError`, :class:`UsageError`: **do not retry**; the pipeline, its schema or the
  call's arguments must be fixed (the message says where). The CLI's exit 2.
* :class:`PermanentError`: **do not retry**; it fails the same way again until a person acts.
  Among them :class:`LockLost` (another process took the job over; it carries on) and
  :class:`LogGap` (changes are gone from the source's log: sync with ``on_gap="reconcile"``, or
  reindex).
* Anything else is unexpected (a bug, or a failure in Spark itself): do not retry it blindly.

**A SparkSession of your own** (``spark=``). Without it, a call that needs Spark starts one
from the pipeline's ``spark`` section and may set up the process for it (``PYSPARK_PYTHON`` while
its context starts, a root-logger filter for py4j's noise, a quieter accumulator server). With it, none of that
happens: the process's environment, its logging and the session's conf are left as they were,
and the job group a job sets on the calling thread is put back afterwards. The pipeline's
``spark`` section is then not used. What the session needs:

* a classic session (not Spark Connect) on PySpark 4, whose Python workers run an interpreter
  with this sparkindex installed: set ``PYSPARK_PYTHON`` before it starts (PySpark reads the
  executors' interpreter from it when the context starts; under spark-submit,
  ``--conf spark.pyspark.python`` or ``--archives`` with it, as docs/deploy.md shows);
* executors that reach the source, the coordination store and the target; a session whose
  master is not ``local`` cannot use a SQLite store (refused, from the session's own master);
* nothing registered: the sync registers its change stream's data source itself, per run. For
  ``spark.read.format("sparkindex")`` in your own code, call
  :func:`sparkindex.spark.register_data_sources` once;
* no conf key is read from it beyond its master and default parallelism (how many tasks a local
  reindex lays out). ``spark.python.worker.reuse=true`` and ``spark.locality.wait=0`` are what
  sparkindex's own sessions use, and suit it.

**The process.** No call installs a signal handler or retunes the process (the garbage
collector's thresholds, the allocator): the CLI does that for itself, explicitly. To stop a sync
that streams until stopped (``until_caught_up=False``), pass a :class:`StopToken` and set it;
to read its health from another thread while it runs (what ``sync --metrics-port`` serves), pass
a :class:`SyncMonitor` and call its ``health()`` (a frozen :class:`SyncHealth`).
"""

from sparkindex.api.admin import apply_deferred, dead_letters, drop_slot, gc, init, redrive, search, stop
from sparkindex.api.calls import (
    StopToken,
    check,
    reindex,
    repair,
    scheduled_verify,
    status,
    sync,
    verify,
    verify_due_at,
)
from sparkindex.api.explain import ExplainResult, explain
from sparkindex.api.loading import PipelineArg, load
from sparkindex.api.progress import CallName, NoProgress, Progress, Tally
from sparkindex.api.results import (
    CheckResult,
    DeadLettersResult,
    DeferredResult,
    DropSlotResult,
    GcResult,
    InitResult,
    Outcome,
    RedriveResult,
    ReindexResult,
    SearchResult,
    StatusResult,
    StopResult,
    SyncResult,
    VerifyResult,
)
from sparkindex.api.sync_monitor import SyncHealth, SyncMonitor
from sparkindex.errors import (
    ConfigError,
    LockHeld,
    LockLost,
    LogGap,
    PermanentError,
    SparkIndexError,
    TransientError,
    UsageError,
)

__all__ = [
    "CallName",
    "CheckResult",
    "ConfigError",
    "DeadLettersResult",
    "DeferredResult",
    "DropSlotResult",
    "ExplainResult",
    "GcResult",
    "InitResult",
    "LockHeld",
    "LockLost",
    "LogGap",
    "NoProgress",
    "Outcome",
    "PermanentError",
    "PipelineArg",
    "Progress",
    "RedriveResult",
    "ReindexResult",
    "SearchResult",
    "SparkIndexError",
    "StatusResult",
    "StopResult",
    "StopToken",
    "SyncHealth",
    "SyncMonitor",
    "SyncResult",
    "Tally",
    "TransientError",
    "UsageError",
    "VerifyResult",
    "apply_deferred",
    "check",
    "dead_letters",
    "drop_slot",
    "explain",
    "gc",
    "init",
    "load",
    "redrive",
    "reindex",
    "repair",
    "scheduled_verify",
    "search",
    "status",
    "stop",
    "sync",
    "verify",
    "verify_due_at",
]

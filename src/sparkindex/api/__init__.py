"""sparkindex as a library: the calls the CLI's commands are made of.

    from sparkindex import api

    result = api.reindex("pipeline.yaml")
    if result.outcome is not api.Outcome.DONE:
        ...

Errors form one tree under :class:`SparkIndexError`: :class:`ConfigError` (the pipeline or its
schema is wrong: fix it), :class:`TransientError` (retry: a rerun resumes where it stopped) and
:class:`PermanentError` (it will fail the same way again). See :mod:`.calls` for what each call
does and leaves alone.
"""

from sparkindex.api.calls import PipelineArg, check, load, reindex, repair, status, sync, verify
from sparkindex.api.results import CheckResult, Outcome, ReindexResult, StatusResult, SyncResult, VerifyResult
from sparkindex.errors import ConfigError, PermanentError, SparkIndexError, TransientError, UsageError

__all__ = [
    "CheckResult",
    "ConfigError",
    "Outcome",
    "PermanentError",
    "PipelineArg",
    "ReindexResult",
    "SparkIndexError",
    "StatusResult",
    "SyncResult",
    "TransientError",
    "UsageError",
    "VerifyResult",
    "check",
    "load",
    "reindex",
    "repair",
    "status",
    "sync",
    "verify",
]

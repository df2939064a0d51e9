"""Orchestration: plan -> run -> finalize (reindex), verify, stop."""

from sparkindex.jobs.reindex import ReindexJob, ReindexSummary
from sparkindex.jobs.verify import VerifyReport, verify_alias

__all__ = ["ReindexJob", "ReindexSummary", "VerifyReport", "verify_alias"]

"""``verify --repair``: fix drift where verify finds it, then verify again.

Repair is a verify pass whose tasks write their fixes as they find them (see
:mod:`sparkindex.verify.ranges`): the documents to index are the ones the task has just
built from the source, so nothing is read twice and nothing but counts reaches the driver,
however large the drift. Missing and stale documents are indexed; every copy of a duplicated id
is deleted and the document indexed once; extra documents are deleted. A second, read-only pass
then reports what is left: rows that cannot be built (dead letters) and documents the target
rejected (dead-lettered under the repair run), or writes that happened meanwhile.

Repair writes into the index the alias points at, never into a version being built; a reindex
that swaps the alias afterwards brings its own, complete index. After writing, it finishes the
index again (``finish_version``: a refresh where the backend needs one to show the writes, and
for Tantivy a merge and the writer service's exit), so the second pass reads what was written.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkindex.config.job import JobConfig
from sparkindex.verify.ranges import TaskOptions
from sparkindex.verify.verifier import Verifier, VerifyReport


@dataclass
class RepairResult:
    #: the first pass: the drift found (and fixed, as far as its writes succeeded)
    before: list[VerifyReport]
    #: the second, read-only pass: what is left
    after: list[VerifyReport]


def repair_options(job: JobConfig, run_id: str) -> TaskOptions:
    return TaskOptions(
        repair=True,
        attempt=f"repair:{run_id}",
        retries=job.retries,
        backoff_initial_s=job.backoff_initial_s,
        backoff_max_s=job.backoff_max_s,
    )


def repair(verifier: Verifier, run_id: str, *, check_after: bool = True) -> RepairResult:
    """Both passes. When the first finds nothing to fix, it is also the second. *check_after*
    False (a sync's gap reconciliation, whose stream applies whatever was written meanwhile and
    reports what the first pass found): the index is finished, the second pass skipped, and the
    first pass stands for both."""
    before = verifier.run(repair_options(verifier.job, run_id))
    if all(r.clean for r in before):
        return RepairResult(before, before)
    for r in before:
        fixed = r.repaired or {}
        if r.index is not None and fixed.get("indexed", 0) + fixed.get("deleted", 0) > 0:
            verifier.target.finish_version(r.index)
    if not check_after:
        return RepairResult(before, before)
    verifier.progress.phase("verifying again after the repair")
    return RepairResult(before, verifier.run(TaskOptions()))

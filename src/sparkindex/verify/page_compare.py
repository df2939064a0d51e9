"""One page of a source range against the index: each built document's copies, looked up by id.

An id the index returns twice is a duplicate; an id it lacks is missing; a copy whose content hash
differs is stale. A row that cannot be built counts as unbuildable, and as missing unless the
index still holds an older copy of it (then that copy is stale: nothing can replace it).
"""

from __future__ import annotations

from collections.abc import Sequence

from sparkindex.documents.builder import BuiltDocument
from sparkindex.documents.tombstones import is_tombstone
from sparkindex.errors import DocumentError
from sparkindex.targets.reader import TargetReader
from sparkindex.verify.drift import RangeSummary
from sparkindex.verify.range_repair import RangeRepair

#: ids per hash lookup or existence query: one request each, small enough for any backend's
#: query-size limits (OpenSearch's default max_terms_count is 65,536)
LOOKUP_CHUNK = 1000


def index_hashes(target: TargetReader, index: str, ids: Sequence[str]) -> dict[str, list[str]]:
    """id -> the hash of every copy the index holds of it, asked in chunks by id."""
    found: dict[str, list[str]] = {}
    for i in range(0, len(ids), LOOKUP_CHUNK):
        for doc_id, doc_hash in target.scan_hashes(index, ids=ids[i : i + LOOKUP_CHUNK]):
            found.setdefault(doc_id, []).append(doc_hash)
    return found


def compare_page(
    target: TargetReader,
    index: str | None,
    docs: Sequence[BuiltDocument],
    failures: Sequence[DocumentError],
    summary: RangeSummary,
    fixer: RangeRepair | None = None,
    found: dict[str, list[str]] | None = None,
) -> None:
    """Classify one page's documents against the index's copies of the same ids (*found*: those
    copies, when the caller read them already)."""
    ids = [d.id for d in docs] + [f.doc_id for f in failures]
    if found is None:
        found = index_hashes(target, index, ids) if index is not None and ids else {}
    summary.checked += len(ids)
    duplicated: list[BuiltDocument] = []
    rewrite: list[BuiltDocument] = []
    for doc in docs:
        copies = found.get(doc.id)
        if not copies:
            summary.note("missing", doc.id)
            rewrite.append(doc)
            continue
        summary.matched += len(copies)
        summary.matched_tombstones += sum(1 for h in copies if is_tombstone(h))
        if len(copies) > 1:
            summary.duplicates += len(copies) - 1
            summary.note_sample("duplicates", doc.id)
            duplicated.append(doc)
        if any(h != doc.hash for h in copies):
            summary.note("stale", doc.id)
            if len(copies) == 1:
                rewrite.append(doc)
    for failure in failures:
        # A row that cannot be built: counted as such, and as missing unless the index still
        # holds an older copy of it (then that copy is stale; nothing can replace it).
        summary.note("unbuildable", failure.doc_id)
        copies = found.get(failure.doc_id)
        if copies:
            summary.matched += len(copies)
            summary.matched_tombstones += sum(1 for h in copies if is_tombstone(h))
            summary.note("stale", failure.doc_id)
            summary.unbuildable_held += 1
        else:
            summary.note("missing", failure.doc_id)
    if fixer is not None:
        fixer.fix(summary, duplicated, rewrite)

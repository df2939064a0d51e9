"""Verification: does the index behind an alias equal the source, document for document?

Single-process for now: it rebuilds every document from the source (keyset pages, the same
builder the job uses), keeps id -> content hash, and compares with the ids and hashes scanned from
the index. ``missing``: in the source, not in the index (rows that cannot be built included, and
counted again as ``unbuildable``); ``extra``: the reverse; ``stale``: both, with different content;
``duplicates``: copies of an id beyond the first (a set of ids could never show them, so the scan
counts every occurrence); ``index_docs``: what the index itself says it holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sparkindex.documents.builder import make_builder
from sparkindex.documents.plan import IndexPlan
from sparkindex.sources.base import KeyRange, Source
from sparkindex.targets.base import Target

SAMPLE = 20


@dataclass
class VerifyReport:
    alias: str
    index: str | None
    checked: int = 0
    missing: int = 0
    extra: int = 0
    stale: int = 0
    duplicates: int = 0
    unbuildable: int = 0
    index_docs: int = 0
    samples: dict[str, list[str]] = field(
        default_factory=lambda: {"missing": [], "extra": [], "stale": [], "duplicates": [], "unbuildable": []}
    )

    @property
    def clean(self) -> bool:
        return self.missing == self.extra == self.stale == self.duplicates == 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def source_hashes(source: Source, plan: IndexPlan) -> tuple[dict[str, str], list[str]]:
    """id -> content hash of every document the source builds, and the ids of rows that fail to build."""
    builder = make_builder(source, plan)
    hashes: dict[str, str] = {}
    unbuildable: list[str] = []
    after = None
    page_size = max(plan.config.page_size, 1000)
    while True:
        page = builder.page(KeyRange(None, None), after, page_size)
        for d in page.docs:
            hashes[d.id] = d.hash
        unbuildable.extend(f.doc_id for f in page.failures)
        if page.rows < page_size:
            return hashes, unbuildable
        after = page.last_key


def verify_alias(source: Source, target: Target, plan: IndexPlan) -> VerifyReport:
    index = target.alias_target(plan.alias)
    report = VerifyReport(plan.alias, index)
    expected, unbuildable = source_hashes(source, plan)
    report.checked = len(expected) + len(unbuildable)
    report.unbuildable = len(unbuildable)
    for doc_id in unbuildable:
        _sample(report, "unbuildable", doc_id)
    seen: set[str] = set()
    if index is not None:
        report.index_docs = target.count(index)
        for doc_id, doc_hash in target.scan_hashes(index):
            if doc_id in seen:
                report.duplicates += 1
                _sample(report, "duplicates", doc_id)
                continue
            seen.add(doc_id)
            want = expected.get(doc_id)
            if want is None:
                report.extra += 1
                _sample(report, "extra", doc_id)
            elif want != doc_hash:
                report.stale += 1
                _sample(report, "stale", doc_id)
    for doc_id in [*(expected.keys() - seen), *unbuildable]:
        report.missing += 1
        _sample(report, "missing", doc_id)
    return report


def _sample(report: VerifyReport, kind: str, doc_id: str) -> None:
    if len(report.samples[kind]) < SAMPLE:
        report.samples[kind].append(doc_id)

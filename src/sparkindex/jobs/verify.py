"""Verification: does the index behind an alias equal the source, document for document?

Single-process for now: it rebuilds every document from the source (keyset pages, the same
builder the job uses), keeps id -> content hash, and compares with the ids and hashes scanned from
the index. ``missing``: in the source, not in the index; ``extra``: the reverse; ``stale``: both,
with different content.
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
    samples: dict[str, list[str]] = field(default_factory=lambda: {"missing": [], "extra": [], "stale": []})

    @property
    def clean(self) -> bool:
        return self.missing == self.extra == self.stale == 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def source_hashes(source: Source, plan: IndexPlan) -> dict[str, str]:
    builder = make_builder(source, plan)
    hashes: dict[str, str] = {}
    after = None
    page_size = max(plan.config.page_size, 1000)
    while True:
        page = builder.page(KeyRange(None, None), after, page_size)
        for d in page.docs:
            hashes[d.id] = d.hash
        if page.rows < page_size:
            return hashes
        after = page.last_key


def verify_alias(source: Source, target: Target, plan: IndexPlan) -> VerifyReport:
    index = target.alias_target(plan.alias)
    report = VerifyReport(plan.alias, index)
    expected = source_hashes(source, plan)
    report.checked = len(expected)
    seen: set[str] = set()
    if index is not None:
        for doc_id, doc_hash in target.scan_hashes(index):
            seen.add(doc_id)
            want = expected.get(doc_id)
            if want is None:
                report.extra += 1
                _sample(report, "extra", doc_id)
            elif want != doc_hash:
                report.stale += 1
                _sample(report, "stale", doc_id)
    for doc_id in expected.keys() - seen:
        report.missing += 1
        _sample(report, "missing", doc_id)
    return report


def _sample(report: VerifyReport, kind: str, doc_id: str) -> None:
    if len(report.samples[kind]) < SAMPLE:
        report.samples[kind].append(doc_id)

"""What one verify task sends back to the driver: counts and a bounded sample of ids per kind.

Tasks never return the ids they checked: a summary is a few hundred bytes whatever the range's
size, so the driver's memory does not grow with the index. Summaries add up (:meth:`merge`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

import orjson

#: ids kept per kind of drift, per task and per report
SAMPLE = 20
KINDS = ("missing", "extra", "stale", "duplicates", "unbuildable")

Side = Literal["source", "index"]


def _samples() -> dict[str, list[str]]:
    return {k: [] for k in KINDS}


@dataclass(kw_only=True)
class DriftCounts:
    """The counts every verify result carries, with a bounded sample of ids per kind."""

    checked: int = 0
    missing: int = 0
    extra: int = 0
    stale: int = 0
    duplicates: int = 0
    unbuildable: int = 0
    samples: dict[str, list[str]] = field(default_factory=_samples)


@dataclass
class RangeSummary(DriftCounts):
    """Drift found in one range (or, merged, in an alias), and what repair wrote for it.

    ``matched`` counts the index's copies of ids the source has: the source-side pass sees
    them, and ``index_docs - matched`` is then exactly the number of extra documents (less the
    tombstones of soft deletes, ``deletes: soft``, whose rows are gone: they are no drift).
    ``matched_tombstones`` counts the tombstones among the matched copies (rows that came back:
    stale), ``tombstones`` those an index-side pass found without a row. ``scanned`` counts what
    an index-side pass read.
    """

    alias: str
    side: Side = "source"
    matched: int = 0
    matched_tombstones: int = 0
    tombstones: int = 0
    scanned: int = 0
    indexed: int = 0
    deleted: int = 0
    failed: int = 0
    seconds: float = 0.0
    #: source ranges compared by checksum first; of them, those whose figures agreed (clean
    #: without a document built for the index), and those that differed and were compared id by id
    ranges_compared: int = 0
    ranges_matched: int = 0
    ranges_descended: int = 0
    #: of the descended, those compared key by key (the index's keys read whole, extra documents
    #: included), not by id
    ranges_by_key: int = 0
    #: copies of ids the source has, found under another document's sort key (or none) by a
    #: range compared key by key: no figure counts them as copies of their id, so the alias is
    #: compared again by id
    foreign: int = 0
    #: of the unbuildable rows, those whose older copy the index holds (counted stale, not missing)
    unbuildable_held: int = 0

    def note(self, kind: str, doc_id: str) -> None:
        """Count one document of *kind* and keep its id if the sample has room."""
        setattr(self, kind, getattr(self, kind) + 1)
        self.note_sample(kind, doc_id)

    def note_sample(self, kind: str, doc_id: str) -> None:
        """Keep *doc_id* in the sample of *kind* without counting it (the caller counts copies)."""
        if len(self.samples[kind]) < SAMPLE:
            self.samples[kind].append(doc_id)

    def merge(self, other: RangeSummary) -> None:
        """Add *other*'s counts (and time) to these; samples stay the first ids in id order."""
        for f in fields(self):
            if f.name not in ("alias", "side", "samples"):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        for kind in KINDS:
            self.samples[kind] = sorted({*self.samples[kind], *other.samples[kind]})[:SAMPLE]

    def to_json(self) -> str:
        return orjson.dumps(asdict(self)).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> RangeSummary:
        raw: dict[str, Any] = orjson.loads(text)
        return cls(**raw)

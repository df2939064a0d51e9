"""Range checksums: a 64-bit check per document, summed per key range on both sides.

Verify compares a key range of the source with the same range of the index by one figure per
side before it compares anything document by document: the number of documents and the sums of
their checks. A range whose figures agree is clean; only a range that differs is compared id by
id (:mod:`sparkindex.verify.ranges`). The sums are order-independent, so the source may add its
documents in any order and the index sums them with its own aggregation, reading no document.

**The check** is the first 8 bytes of MD5 over the hash key of the plan's shape
(:func:`sparkindex.documents.hashing.shape_key`: empty unless the index has a transform or a
routing column), the document's id, a NUL byte and its canonical JSON. MD5 because PostgreSQL
computes it in the statement that writes the canonical JSON, so a range's checksum crosses the
wire as three numbers (``JsonAggregationBuilder.database_checksum`` in
:mod:`sparkindex.documents.in_database`). It is a fingerprint for comparing, not a defence
against an adversary: whoever can write the index can write its content hashes too.

**Two halves.** The check is stored as two integer fields of 32 bits each (``_check_hi``,
``_check_lo``) and each half is summed on its own: every engine sums numeric fields in double
precision (OpenSearch's and Elasticsearch's ``sum``/``stats``, Tantivy's ``stats``), which is
exact only below 2**53. Sums of 32-bit values are exact for up to 2**21 documents per range; a
range holding more (:data:`MAX_EXACT_COUNT`) is never called equal by its sums: it is compared id
by id.

**What a false match needs.** A range is called clean when the counts and both sums agree. For a
range that differs in *k* documents' checks, the sums agree by chance with probability about
``2**-64`` when *k* is 1 (both 32-bit halves of two different MD5 prefixes equal), and for any
*k* no more than about ``2**-64`` times a small factor (each half's difference is a sum of
uniform 32-bit values; it is zero with probability at most ``2**-32`` per half). docs/operations.md
states the figure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

#: the fields an index stores a document's check in (high and low 32 bits)
CHECK_HI_FIELD = "_check_hi"
CHECK_LO_FIELD = "_check_lo"
CHECK_FIELDS = (CHECK_HI_FIELD, CHECK_LO_FIELD)
#: bits in a document's check
CHECK_BITS = 64
#: above this many documents in a range, a double-precision sum of 32-bit halves may round
MAX_EXACT_COUNT = 2**21

_HALF = 2**32


def document_check(doc_id: str, canonical: bytes, key: bytes = b"") -> int:
    """The 64-bit check of document *doc_id*: MD5 over *key*, the id, a NUL byte and *canonical*,
    its first 8 bytes. The id is in it because a body need not hold its key (``exclude`` of the
    key column, a transform): two documents of a range swapping bodies must change the sums."""
    digest = hashlib.md5(key, usedforsecurity=False)
    digest.update(doc_id.encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    digest.update(canonical)
    return int.from_bytes(digest.digest()[:8], "big")


def check_halves(check: int) -> tuple[int, int]:
    """*check* as the two 32-bit values an index stores (high, low)."""
    return check >> 32, check & (_HALF - 1)


@dataclass(frozen=True, slots=True)
class RangeChecksum:
    """One side's figure for one key range: how many documents, and the sums of their checks'
    halves. Documents without a check (written before indexes stored them, and the tombstones of
    soft deletes) are not in it."""

    count: int = 0
    hi: int = 0
    lo: int = 0
    #: the index's side: documents of the range that store no check (tombstones, or written by
    #: a sparkindex that stored none), which the figure cannot speak for
    unchecked: int = field(default=0, compare=False)

    @classmethod
    def of_checks(cls, checks: list[int]) -> RangeChecksum:
        return cls(len(checks), sum(c >> 32 for c in checks), sum(c & (_HALF - 1) for c in checks))

    def __add__(self, other: RangeChecksum) -> RangeChecksum:
        return RangeChecksum(self.count + other.count, self.hi + other.hi, self.lo + other.lo)

    @property
    def exact(self) -> bool:
        """Whether an engine's double-precision sums of this many documents are exact."""
        return self.count < MAX_EXACT_COUNT

    def matches(self, other: RangeChecksum) -> bool:
        """Both sides hold the same documents with checks, as far as the checksum can tell (see
        the module's doc for the odds of a false match); never for a range too large to sum
        exactly. Documents without a check are the caller's to weigh (``unchecked``)."""
        return self.exact and other.exact and self == other

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "hi": self.hi, "lo": self.lo}


@dataclass(frozen=True, slots=True)
class KeyCheck:
    """What an index holds under one sort key: how many documents, how many of them store a
    check, and the sums of those checks' halves. One document with a check: ``check`` is it."""

    sort_key: str
    docs: int
    checked: int
    hi: int
    lo: int

    @property
    def check(self) -> int | None:
        """The one document's check; None unless exactly one document holds the key, with a check."""
        if self.docs != 1 or self.checked != 1:
            return None
        return (self.hi << 32) | self.lo

"""Drift seen on a read replica is asked again of the primary before it counts or is fixed.

With ``source.read_url`` verify's ranges read the replica (the heavy read stays off the
primary), but a replica is behind by its replay lag, and a live sync writes what the primary
says. Judged by the replica alone, a row inserted on the primary and already indexed would be
"extra" (and repair would delete it), a row deleted there "missing" (repair would index it
again), a row updated there "stale" (repair would write the older replica version over the
newer document). So every id the replica's read calls drift is read again from the primary by
key, with the builders change capture uses, and only what the primary says counts and is
written: present there, its document is compared and written; absent, the index's copy is
extra. Ids the replica and the index agree on are not asked again: the cost is one by-key read
of the primary per drifted id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkindex.documents.builder import BuiltDocument, DocumentBuilder
from sparkindex.documents.source_lookup import Key, SourceLookup
from sparkindex.documents.tombstones import is_tombstone
from sparkindex.errors import DocumentError
from sparkindex.targets.reader import TargetReader


@dataclass
class PrimaryPage:
    """One page as the primary has it now, for the ids the replica's read found drifted."""

    docs: list[BuiltDocument]
    failures: list[DocumentError]
    #: ids the primary builds no document for any more, with the index's live copies of them
    gone: dict[str, int]


def drifted(docs: Sequence[BuiltDocument], failures: Sequence[DocumentError], found: dict[str, list[str]]) -> set[str]:
    """The ids whose index copies are not exactly one copy of the replica's document."""
    out = {f.doc_id for f in failures}
    out.update(d.id for d in docs if found.get(d.id) != [d.hash])
    return out


def _root_keys(lookup: SourceLookup, docs: Sequence[BuiltDocument], failures: Sequence[DocumentError]) -> list[Key]:
    """The primary's root rows to rebuild: a root's own key, a join child's parent's."""
    keys: list[Key] = []
    for doc in docs:
        key = lookup.root_key(doc.routing if lookup.child_of(doc.id) is not None and doc.routing else doc.id)
        if key is not None:
            keys.append(key)
    for failure in failures:
        ref = lookup.child_of(failure.doc_id)
        if ref is None:
            key = lookup.root_key(failure.doc_id)
            keys.extend([] if key is None else [key])
        else:
            keys.extend(lookup.parents_of(ref.relation, [ref.key]).values())
    return keys


def recheck(
    target: TargetReader,
    index: str,
    primary: DocumentBuilder,
    lookup: SourceLookup,
    suspects: set[str],
    docs: Sequence[BuiltDocument],
    failures: Sequence[DocumentError],
    found: dict[str, list[str]],
) -> PrimaryPage:
    """Replace the replica's documents of *suspects* by the primary's (read now, by key), and
    *found*'s copies of them by the index's copies read after that read, so that a document a
    live sync wrote meanwhile is compared with a row at least as new as it."""
    keys = _root_keys(lookup, [d for d in docs if d.id in suspects], [f for f in failures if f.doc_id in suspects])
    built, broken, _gone = primary.by_keys(keys) if keys else ([], [], [])
    now = {d.id: d for d in built if d.id in suspects}
    bad = {f.doc_id: f for f in broken if f.doc_id in suspects and f.doc_id not in now}
    for doc_id in suspects:
        found.pop(doc_id, None)
    ids = sorted(suspects)
    for i in range(0, len(ids), 1000):
        for doc_id, doc_hash in target.scan_hashes(index, ids=ids[i : i + 1000]):
            found.setdefault(doc_id, []).append(doc_hash)
    gone: dict[str, int] = {}
    for doc_id in suspects:
        if doc_id in now or doc_id in bad:
            continue
        live = sum(1 for h in found.pop(doc_id, []) if not is_tombstone(h))
        if live:
            gone[doc_id] = live
    kept = [d for d in docs if d.id not in suspects]
    return PrimaryPage(
        [*kept, *now.values()], [*(f for f in failures if f.doc_id not in suspects), *bad.values()], gone
    )


def present_on_primary(lookup: SourceLookup | None, ids: Sequence[str]) -> set[str]:
    """Of ids the replica has no row for, those the primary has (none without a replica)."""
    return set() if lookup is None or not ids else lookup.existing(list(ids))


__all__ = ["PrimaryPage", "drifted", "present_on_primary", "recheck"]

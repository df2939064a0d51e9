"""The transform cache (``si_transform_cache``): per alias and document, the hash of an expensive
transform's inputs and what the transform did to the document then, as a JSON diff.

A transform with ``on_change`` (an embedding, say) runs only for documents whose inputs changed
since the last run; every other document gets the diff kept here applied instead
(:mod:`sparkindex.documents.transform` owns the hash and the diff; this module keeps bytes).

Writes are upserts, never delete-then-insert: a reindex and a live sync may transform the same
document at once, and two inserts of one key would then fail one of them. The cache is advisory
(a lost entry costs one call of the transform), so each chunk commits on its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite

from sparkindex.coordination.base import StoreBase, rerun_on_conflict

#: ids looked up per IN query (bind-parameter limits)
LOOKUP_CHUNK = 500
#: rows upserted per statement: a diff holding an embedding is tens of KB, and MySQL/MariaDB
#: refuse a statement beyond ``max_allowed_packet`` (16 MB by default)
PUT_CHUNK = 100


class TransformOutputCache(StoreBase):
    """What ``store.transform_cache`` is: it satisfies
    :class:`sparkindex.documents.transform.TransformCache` (without importing it)."""

    @rerun_on_conflict
    def lookup(self, alias: str, doc_ids: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        """``{doc_id: (input_hash, diff)}`` for the ids of *alias* that have an entry."""
        t = self.t.transform_cache
        out: dict[str, tuple[str, bytes]] = {}
        unique = list(dict.fromkeys(doc_ids))
        with self.engine.connect() as conn:
            for i in range(0, len(unique), LOOKUP_CHUNK):
                chunk = unique[i : i + LOOKUP_CHUNK]
                stmt = sa.select(t.c.doc_id, t.c.input_hash, t.c.diff).where(t.c.alias == alias, t.c.doc_id.in_(chunk))
                out.update({r.doc_id: (r.input_hash, r.diff.encode()) for r in conn.execute(stmt)})
        return out

    @rerun_on_conflict
    def put(self, alias: str, entries: Sequence[tuple[str, str, bytes]]) -> None:
        """Keep ``(doc_id, input_hash, diff)`` entries of *alias*, replacing those the ids had; of
        one id given twice, the last wins. Rows go in id order, so that two writers overlapping on
        some ids lock them in the same order (MySQL/MariaDB would otherwise deadlock them)."""
        latest = {doc_id: (input_hash, diff) for doc_id, input_hash, diff in entries}
        if not latest:
            return
        now = time.time()
        rows = [
            {"alias": alias, "doc_id": d, "input_hash": h, "diff": diff.decode(), "updated_at": now}
            for d, (h, diff) in sorted(latest.items())
        ]
        for i in range(0, len(rows), PUT_CHUNK):
            with self.engine.begin() as conn:
                conn.execute(self._upsert(conn.dialect.name), rows[i : i + PUT_CHUNK])

    @rerun_on_conflict
    def forget(self, alias: str) -> int:
        """Drop every entry of *alias* (the alias was dropped: nothing will look them up again);
        returns how many rows went."""
        t = self.t.transform_cache
        with self.engine.begin() as conn:
            return int(conn.execute(t.delete().where(t.c.alias == alias)).rowcount)

    def _upsert(self, dialect: str) -> Any:
        """INSERT that replaces the row of an existing (alias, doc_id), in the dialect's own words."""
        t = self.t.transform_cache
        replaced = ("input_hash", "diff", "updated_at")
        if dialect in ("mysql", "mariadb"):
            my = mysql.insert(t)
            return my.on_duplicate_key_update({c: my.inserted[c] for c in replaced})
        if dialect == "postgresql":
            pg = postgresql.insert(t)
            return pg.on_conflict_do_update(
                index_elements=[t.c.alias, t.c.doc_id], set_={c: pg.excluded[c] for c in replaced}
            )
        lite = sqlite.insert(t)
        return lite.on_conflict_do_update(
            index_elements=[t.c.alias, t.c.doc_id], set_={c: lite.excluded[c] for c in replaced}
        )

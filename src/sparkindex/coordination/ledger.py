"""The version ledger (``si_doc_version``): per physical index and document, the newest external
version written, for targets that do not compare versions themselves (Tantivy); a delete keeps
its version too (a tombstone), so a late write of an older version is still refused.

Its rows belong to one index version: whoever deletes a version (pruning after a swap, ``gc``)
calls :meth:`VersionLedger.drop_versions` for it, so the ledger shrinks with the versions kept.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import sqlalchemy as sa

from sparkindex.coordination.base import StoreBase, rerun_on_conflict

#: Versions are looked up and replaced in chunks of this many ids (bind-parameter limits).
CHUNK = 500


class VersionLedger(StoreBase):
    @rerun_on_conflict
    def versions(self, index: str, doc_ids: Sequence[str]) -> dict[str, int]:
        t = self.t.doc_version
        out: dict[str, int] = {}
        unique = list(dict.fromkeys(doc_ids))
        with self.engine.connect() as conn:
            for i in range(0, len(unique), CHUNK):
                chunk = unique[i : i + CHUNK]
                stmt = sa.select(t.c.doc_id, t.c.version).where(t.c.index_name == index, t.c.doc_id.in_(chunk))
                out.update({r.doc_id: int(r.version) for r in conn.execute(stmt)})
        return out

    @rerun_on_conflict
    def record_versions(self, index: str, versions: Mapping[str, int]) -> None:
        """Replace the versions of these documents (delete + insert: portable, two statements per chunk)."""
        t = self.t.doc_version
        now = time.time()
        items = list(versions.items())
        with self.engine.begin() as conn:
            for i in range(0, len(items), CHUNK):
                chunk = items[i : i + CHUNK]
                conn.execute(t.delete().where(t.c.index_name == index, t.c.doc_id.in_([d for d, _ in chunk])))
                conn.execute(
                    t.insert(), [{"index_name": index, "doc_id": d, "version": v, "updated_at": now} for d, v in chunk]
                )

    @rerun_on_conflict
    def drop_versions(self, index: str) -> int:
        """Forget every version recorded for *index* (the index version itself was deleted);
        returns how many rows went."""
        t = self.t.doc_version
        with self.engine.begin() as conn:
            return int(conn.execute(t.delete().where(t.c.index_name == index)).rowcount)

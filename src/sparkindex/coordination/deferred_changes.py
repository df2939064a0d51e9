"""Deferred changes (table ``si_change_snapshot``, a name kept so existing stores need no
migration): changes held back per alias, table and row key, to be applied later
(``sync.deferred_at``). A later change to the same row replaces the earlier one (a delay, as
search-center's sync has) but keeps every row image seen, so a parent the row left is rebuilt too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.coordination.base import StoreBase, rerun_on_conflict


@dataclass(frozen=True)
class DeferredChange:
    alias: str
    table: str
    row_key: str
    images: list[dict[str, Any]]
    position: int


class DeferredChanges(StoreBase):
    @rerun_on_conflict
    def defer(self, alias: str, changes: Sequence[tuple[str, str, list[dict[str, Any]], int]]) -> None:
        """Record (table, row key, row images, position); a later change to a row replaces the
        earlier one but keeps its images, so a parent the row left is rebuilt too."""
        t = self.t.change_snapshot
        now = time.time()
        with self.engine.begin() as conn:
            for table, row_key, images, position in changes:
                cond = sa.and_(t.c.alias == alias, t.c.tbl == table, t.c.row_key == row_key)
                row = conn.execute(sa.select(t.c.images, t.c.position).where(cond)).first()
                if row is None:
                    conn.execute(
                        t.insert().values(
                            alias=alias,
                            tbl=table,
                            row_key=row_key,
                            images=_images(images),
                            position=position,
                            recorded_at=now,
                        )
                    )
                    continue
                merged = [*orjson.loads(row.images), *images]
                conn.execute(
                    t.update()
                    .where(cond)
                    .values(images=_images(merged), position=max(int(row.position), position), recorded_at=now)
                )

    @rerun_on_conflict
    def deferred(self, alias: str) -> list[DeferredChange]:
        t = self.t.change_snapshot
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).where(t.c.alias == alias).order_by(t.c.tbl, t.c.row_key)).fetchall()
        return [DeferredChange(r.alias, r.tbl, r.row_key, orjson.loads(r.images), int(r.position)) for r in rows]

    @rerun_on_conflict
    def clear_deferred(self, alias: str, done: Sequence[DeferredChange]) -> int:
        """Remove applied records unless a newer change replaced them meanwhile."""
        t = self.t.change_snapshot
        removed = 0
        with self.engine.begin() as conn:
            for d in done:
                res = conn.execute(
                    t.delete().where(
                        t.c.alias == alias, t.c.tbl == d.table, t.c.row_key == d.row_key, t.c.position == d.position
                    )
                )
                removed += res.rowcount
        return removed


def _images(images: list[dict[str, Any]]) -> str:
    unique: dict[bytes, dict[str, Any]] = {}
    for image in images:
        unique.setdefault(orjson.dumps(image, option=orjson.OPT_SORT_KEYS, default=str), image)
    return orjson.dumps(list(unique.values()), default=str).decode()

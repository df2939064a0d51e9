"""A store whose sync-offset table predates a column (``retained_bytes``, the slot's retained log
behind ``sparkindex_sync_retained_bytes``) gets it when opened, on every store kind (the schema's
migration, :func:`coordination.engine.ensure_schema`; tests/coordination/test_schema_upgrade.py
covers whole stores of the version before)."""

from __future__ import annotations

import sqlalchemy as sa

from sparkindex.coordination.engine import make_engine
from sparkindex.coordination.offsets import ConsumerOffsetRows, make_offset_tables
from tests.coordination.helpers import concept_on


def test_an_offsets_table_from_before_gets_the_new_column(store_url: tuple[str, str]) -> None:
    url, prefix = store_url
    engine = make_engine(url)
    tables = make_offset_tables(prefix)
    before = sa.MetaData()
    sa.Table(tables.offset.name, before, *[c._copy() for c in tables.offset.columns if c.name != "retained_bytes"])
    try:
        before.create_all(engine)
        offsets = concept_on(ConsumerOffsetRows, engine, prefix)
        offsets.save("g", {"products": (5, {"lsn": 5}, "products_v1")}, retained_bytes=7_340_032)
        concept_on(ConsumerOffsetRows, engine, prefix)  # the next process finds the column there
        with engine.connect() as conn:
            stored = conn.execute(sa.select(tables.offset.c.retained_bytes)).scalar_one()
        assert stored == 7_340_032
        assert offsets.offsets("g")["products"].position == 5
    finally:
        tables.metadata.drop_all(engine)
        engine.dispose()

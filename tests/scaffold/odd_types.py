"""A table of each dialect's own types, under a mixed-case name with a space in a column name:
what a real schema has and TPC-H does not (arrays, jsonb, inet, intervals, MariaDB's SET, YEAR
and BIT, doubles, blobs). ``init`` keeps what documents can hold and leaves the rest out with a
comment; the pipeline must still reindex and verify clean. It references TPC-H's ``part``.
"""

from __future__ import annotations

import sqlalchemy as sa

#: rows in "Gadget"
ROWS = 40

DDL = {
    "sqlite": """
        CREATE TABLE "Gadget" ("Id" INTEGER PRIMARY KEY, "Full Name" TEXT NOT NULL, weight REAL, flag BOOLEAN,
          photo BLOB, made DATETIME, p_partkey INTEGER REFERENCES part(p_partkey))
    """,
    "postgresql": """
        CREATE TABLE "Gadget" ("Id" serial PRIMARY KEY, "Full Name" text NOT NULL, tags text[], meta jsonb,
          uid uuid, ip inet, photo bytea, span interval, weight double precision, flag boolean,
          made timestamptz, p_partkey int REFERENCES part(p_partkey))
    """,
    "mysql": """
        CREATE TABLE `Gadget` (`Id` int AUTO_INCREMENT PRIMARY KEY, `Full Name` text NOT NULL, meta json,
          st set('red','green','blue'), en enum('S','M','L'), yr year, bits bit(8), weight double,
          flag tinyint(1), photo blob, made datetime(6), p_partkey int,
          FOREIGN KEY (p_partkey) REFERENCES part(p_partkey))
    """,
}

NAMES = ["pipe|and:colon", "comma, quote ' \"", "Grüße \\ back", "日本語", "tab\there"]


def load_odd_types(engine: sa.Engine) -> int:
    """Create and fill "Gadget" (after the TPC-H tables); returns its row count."""
    dialect = engine.dialect.name
    with engine.begin() as conn:
        conn.exec_driver_sql(DDL[dialect])
        table = sa.Table("Gadget", sa.MetaData(), autoload_with=conn)
        rows = []
        for i in range(1, ROWS + 1):
            row = {
                "Id": i,
                "Full Name": f"{NAMES[i % len(NAMES)]} #{i}",
                "weight": None if i % 7 == 0 else i / 3,
                "flag": None if i % 5 == 0 else i % 2 == 0,
                "photo": None if i % 3 == 0 else bytes([i, 0, 255]),
                "p_partkey": None if i % 4 == 0 else 1 + i % 40,
            }
            if dialect == "postgresql":
                row.update(tags=["a", "b,c", None][: i % 4], meta={"k": [i, "two"], "n": None}, ip="10.0.0.1")
            if dialect == "mysql":
                colours = {"red", "blue"} if i % 2 else set()
                row.update(meta='{"k": [1, "two"]}', st=colours, en="SML"[i % 3], yr=2000 + i)
            rows.append(row)
        conn.execute(table.insert(), rows)
        later = table.update().where(table.c.Id > 20)
        conn.execute(later.values(made=sa.func.current_timestamp()))
        if dialect == "postgresql":
            conn.execute(later.values(uid=sa.func.gen_random_uuid(), span=table.c.Id * sa.text("interval '1 hour'")))
    return ROWS

"""A small TPC-H database (the eight tables of the public TPC-H specification, section 1.4), for
``sparkindex init`` on a schema nobody tuned for it.

Keys and foreign keys follow the specification: PARTSUPP's primary key is (PS_PARTKEY,
PS_SUPPKEY), LINEITEM's is (L_ORDERKEY, L_LINENUMBER) and LINEITEM references PARTSUPP through
the compound (L_PARTKEY, L_SUPPKEY). The data is deterministic for a seed and deliberately
hostile: mixed case, punctuation and the separators other tools split on ('|', ':', ',') inside
text, quotes and backslashes, non-ASCII, and NULLs wherever a column allows them (the comments
and a few balances are nullable here, unlike in the specification, so that NULLs occur).
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

#: text that breaks naive splitting, quoting and case folding
HOSTILE = [
    "Plain",
    "UPPER lower MiXeD",
    "pipe|separated|value",
    "colon: separated: value",
    "comma, separated, value",
    'quote \' and "double"',
    "back\\slash",
    "semi;colon -- dash",
    "Grüße, Ökonomie & Café",
    "日本語 テキスト",
    "tab\there",
    "percent % and _underscore_",
    "#hash not a comment",
    "{braces} [brackets] (parens)",
    "ends with space ",
]

SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
SHIPMODES = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"]
REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]
NATIONS = [
    ("ALGERIA", 0),
    ("ARGENTINA", 1),
    ("BRAZIL", 1),
    ("CANADA", 1),
    ("EGYPT", 4),
    ("ETHIOPIA", 0),
    ("FRANCE", 3),
    ("GERMANY", 3),
    ("INDIA", 2),
    ("INDONESIA", 2),
    ("IRAN", 4),
    ("IRAQ", 4),
    ("JAPAN", 2),
    ("JORDAN", 4),
    ("KENYA", 0),
    ("MOROCCO", 0),
    ("MOZAMBIQUE", 0),
    ("PERU", 1),
    ("CHINA", 2),
    ("ROMANIA", 3),
    ("SAUDI ARABIA", 4),
    ("VIETNAM", 2),
    ("RUSSIA", 3),
    ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
]


def money() -> sa.Numeric[Decimal]:
    return sa.Numeric(15, 2)


def define_tpch(meta: sa.MetaData) -> None:
    """The eight TPC-H tables with the specification's keys (comments nullable, see above)."""
    sa.Table(
        "region",
        meta,
        sa.Column("r_regionkey", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("r_name", sa.CHAR(25), nullable=False),
        sa.Column("r_comment", sa.String(152)),
    )
    sa.Table(
        "nation",
        meta,
        sa.Column("n_nationkey", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("n_name", sa.CHAR(25), nullable=False),
        sa.Column("n_regionkey", sa.Integer, sa.ForeignKey("region.r_regionkey"), nullable=False),
        sa.Column("n_comment", sa.String(152)),
    )
    sa.Table(
        "supplier",
        meta,
        sa.Column("s_suppkey", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("s_name", sa.CHAR(25), nullable=False),
        sa.Column("s_address", sa.String(40), nullable=False),
        sa.Column("s_nationkey", sa.Integer, sa.ForeignKey("nation.n_nationkey"), nullable=False),
        sa.Column("s_phone", sa.CHAR(15), nullable=False),
        sa.Column("s_acctbal", money()),
        sa.Column("s_comment", sa.String(101)),
    )
    sa.Table(
        "customer",
        meta,
        sa.Column("c_custkey", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("c_name", sa.String(25), nullable=False),
        sa.Column("c_address", sa.String(40), nullable=False),
        sa.Column("c_nationkey", sa.Integer, sa.ForeignKey("nation.n_nationkey"), nullable=False),
        sa.Column("c_phone", sa.CHAR(15), nullable=False),
        sa.Column("c_acctbal", money()),
        sa.Column("c_mktsegment", sa.CHAR(10), nullable=False),
        sa.Column("c_comment", sa.String(117)),
    )
    sa.Table(
        "part",
        meta,
        sa.Column("p_partkey", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("p_name", sa.String(55), nullable=False),
        sa.Column("p_mfgr", sa.CHAR(25), nullable=False),
        sa.Column("p_brand", sa.CHAR(10), nullable=False),
        sa.Column("p_type", sa.String(25), nullable=False),
        sa.Column("p_size", sa.Integer, nullable=False),
        sa.Column("p_container", sa.CHAR(10), nullable=False),
        sa.Column("p_retailprice", money(), nullable=False),
        sa.Column("p_comment", sa.String(23)),
    )
    sa.Table(
        "partsupp",
        meta,
        sa.Column("ps_partkey", sa.Integer, sa.ForeignKey("part.p_partkey"), primary_key=True, autoincrement=False),
        sa.Column("ps_suppkey", sa.Integer, sa.ForeignKey("supplier.s_suppkey"), primary_key=True),
        sa.Column("ps_availqty", sa.Integer, nullable=False),
        sa.Column("ps_supplycost", money(), nullable=False),
        sa.Column("ps_comment", sa.String(199)),
    )
    sa.Table(
        "orders",
        meta,
        sa.Column("o_orderkey", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("o_custkey", sa.Integer, sa.ForeignKey("customer.c_custkey"), nullable=False),
        sa.Column("o_orderstatus", sa.CHAR(1), nullable=False),
        sa.Column("o_totalprice", money(), nullable=False),
        sa.Column("o_orderdate", sa.Date, nullable=False),
        sa.Column("o_orderpriority", sa.CHAR(15), nullable=False),
        sa.Column("o_clerk", sa.CHAR(15), nullable=False),
        sa.Column("o_shippriority", sa.Integer, nullable=False),
        sa.Column("o_comment", sa.String(79)),
    )
    sa.Table(
        "lineitem",
        meta,
        sa.Column("l_orderkey", sa.Integer, sa.ForeignKey("orders.o_orderkey"), primary_key=True, autoincrement=False),
        sa.Column("l_partkey", sa.Integer, nullable=False),
        sa.Column("l_suppkey", sa.Integer, nullable=False),
        sa.Column("l_linenumber", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("l_quantity", money(), nullable=False),
        sa.Column("l_extendedprice", money(), nullable=False),
        sa.Column("l_discount", money(), nullable=False),
        sa.Column("l_tax", money(), nullable=False),
        sa.Column("l_returnflag", sa.CHAR(1), nullable=False),
        sa.Column("l_linestatus", sa.CHAR(1), nullable=False),
        sa.Column("l_shipdate", sa.Date, nullable=False),
        sa.Column("l_commitdate", sa.Date, nullable=False),
        sa.Column("l_receiptdate", sa.Date, nullable=False),
        sa.Column("l_shipinstruct", sa.CHAR(25), nullable=False),
        sa.Column("l_shipmode", sa.CHAR(10), nullable=False),
        sa.Column("l_comment", sa.String(44)),
        sa.ForeignKeyConstraint(["l_partkey", "l_suppkey"], ["partsupp.ps_partkey", "partsupp.ps_suppkey"]),
    )


class Text:
    """Hostile text of a bounded length, or NULL about one time in *null_every*."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def __call__(self, limit: int, null_every: int = 0) -> str | None:
        if null_every and self.rng.randrange(null_every) == 0:
            return None
        words = [self.rng.choice(HOSTILE) for _ in range(self.rng.randint(1, 3))]
        return " ".join(words)[:limit].rstrip() or "x"


def fill_tpch(conn: sa.Connection, meta: sa.MetaData, seed: int = 18) -> dict[str, int]:
    """Rows for every TPC-H table (about 900 in all); returns the row count per table."""
    rng = random.Random(seed)
    text = Text(rng)
    t = meta.tables
    rows: dict[str, list[dict[str, Any]]] = {}
    rows["region"] = [
        {"r_regionkey": i, "r_name": name, "r_comment": text(152, null_every=3)} for i, name in enumerate(REGIONS)
    ]
    rows["nation"] = [
        {"n_nationkey": i, "n_name": name, "n_regionkey": region, "n_comment": text(152, null_every=4)}
        for i, (name, region) in enumerate(NATIONS)
    ]
    rows["supplier"] = [
        {
            "s_suppkey": i,
            "s_name": f"Supplier#{i:09d}",
            "s_address": text(40),
            "s_nationkey": rng.randrange(len(NATIONS)),
            "s_phone": f"{10 + i:02d}-{rng.randint(100, 999)}-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
            "s_acctbal": None if i % 7 == 0 else Decimal(rng.randint(-99999, 999999)) / 100,
            "s_comment": text(101, null_every=5),
        }
        for i in range(1, 11)
    ]
    rows["customer"] = [
        {
            "c_custkey": i,
            "c_name": f"Customer#{i:09d}" if i % 3 else text(25),
            "c_address": text(40),
            "c_nationkey": rng.randrange(len(NATIONS)),
            "c_phone": f"{10 + i % 25:02d}-{rng.randint(100, 999)}-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
            "c_acctbal": None if i % 9 == 0 else Decimal(rng.randint(-99999, 999999)) / 100,
            "c_mktsegment": rng.choice(SEGMENTS),
            "c_comment": text(117, null_every=4),
        }
        for i in range(1, 31)
    ]
    rows["part"] = [
        {
            "p_partkey": i,
            "p_name": text(55),
            "p_mfgr": f"Manufacturer#{1 + i % 5}",
            "p_brand": f"Brand#{1 + i % 5}{1 + i % 4}",
            "p_type": rng.choice(["STANDARD ANODIZED TIN", "SMALL PLATED COPPER", "PROMO|BURNISHED:NICKEL"]),
            "p_size": rng.randint(1, 50),
            "p_container": rng.choice(["SM CASE", "LG BOX", "MED, PACK", "JUMBO|JAR"]),
            "p_retailprice": Decimal(90000 + i * 10 + i % 200) / 100,
            "p_comment": text(23, null_every=3),
        }
        for i in range(1, 41)
    ]
    suppliers = len(rows["supplier"])
    rows["partsupp"] = [
        {
            "ps_partkey": p,
            "ps_suppkey": 1 + (p + j * (suppliers // 4)) % suppliers,
            "ps_availqty": rng.randint(1, 9999),
            "ps_supplycost": Decimal(rng.randint(100, 100000)) / 100,
            "ps_comment": text(199, null_every=6),
        }
        for p in range(1, 41)
        for j in range(4)
    ]
    start = dt.date(1992, 1, 1)
    rows["orders"], rows["lineitem"] = [], []
    for o in range(1, 121):
        key = o * 4 - (o % 3)  # sparse keys, as the specification's are
        ordered = start + dt.timedelta(days=rng.randint(0, 2400))
        rows["orders"].append(
            {
                "o_orderkey": key,
                "o_custkey": rng.randint(1, 30),
                "o_orderstatus": rng.choice("OFP"),
                "o_totalprice": Decimal(rng.randint(100000, 50000000)) / 100,
                "o_orderdate": ordered,
                "o_orderpriority": rng.choice(PRIORITIES),
                "o_clerk": f"Clerk#{rng.randint(1, 1000):09d}",
                "o_shippriority": 0,
                "o_comment": text(79, null_every=4),
            }
        )
        for line in range(1, rng.randint(1, 7) + 1):
            supply = rng.choice(rows["partsupp"])
            shipped = ordered + dt.timedelta(days=rng.randint(1, 121))
            rows["lineitem"].append(
                {
                    "l_orderkey": key,
                    "l_partkey": supply["ps_partkey"],
                    "l_suppkey": supply["ps_suppkey"],
                    "l_linenumber": line,
                    "l_quantity": Decimal(rng.randint(1, 50)),
                    "l_extendedprice": Decimal(rng.randint(100000, 10000000)) / 100,
                    "l_discount": Decimal(rng.randint(0, 10)) / 100,
                    "l_tax": Decimal(rng.randint(0, 8)) / 100,
                    "l_returnflag": rng.choice("RAN"),
                    "l_linestatus": rng.choice("OF"),
                    "l_shipdate": shipped,
                    "l_commitdate": ordered + dt.timedelta(days=rng.randint(30, 90)),
                    "l_receiptdate": shipped + dt.timedelta(days=rng.randint(1, 30)),
                    "l_shipinstruct": rng.choice(["DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"]),
                    "l_shipmode": rng.choice(SHIPMODES),
                    "l_comment": text(44, null_every=5),
                }
            )
    for name in ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"):
        conn.execute(t[name].insert(), rows[name])
    return {name: len(r) for name, r in rows.items()}

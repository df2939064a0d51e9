"""The shapes TPC-H lacks, beside it in the same database, for ``sparkindex init``:

* a many-to-many link table: ``book`` and ``author`` through ``book_author`` (its primary key is
  its two foreign keys and it has no other column);
* a self-referencing table: ``employee.manager_id`` references ``employee``; and a cycle through
  two tables: ``employee.dept_id`` -> ``department``, ``department.head_emp_id`` -> ``employee``;
* a table without a primary key but with a unique NOT NULL key: ``currency (code)``, referenced
  by ``book.currency_code`` (a foreign key to a unique key, not to a primary key);
* a table without any usable key: ``audit_log`` (no primary key, no unique key), which also
  references ``employee``;
* a binary column (``book.cover``) and unbounded text (``book.blurb``, ``author.bio``).
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import sqlalchemy as sa

from tests.scaffold.tpch import Text


def define_extras(meta: sa.MetaData) -> None:
    sa.Table(
        "currency",
        meta,
        sa.Column("code", sa.CHAR(3), nullable=False),
        sa.Column("name", sa.String(50), nullable=False),
        sa.UniqueConstraint("code", name="currency_code_key"),
    )
    sa.Table(
        "author",
        meta,
        sa.Column("author_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("bio", sa.Text),
    )
    sa.Table(
        "book",
        meta,
        sa.Column("book_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("blurb", sa.Text),
        sa.Column("cover", sa.LargeBinary),
        sa.Column("published", sa.Date),
        sa.Column("currency_code", sa.CHAR(3), sa.ForeignKey("currency.code")),
    )
    sa.Table(
        "book_author",
        meta,
        sa.Column("book_id", sa.Integer, sa.ForeignKey("book.book_id"), primary_key=True, autoincrement=False),
        sa.Column("author_id", sa.Integer, sa.ForeignKey("author.author_id"), primary_key=True),
    )
    sa.Table(
        "department",
        meta,
        sa.Column("dept_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(60), nullable=False),
        sa.Column(
            "head_emp_id", sa.Integer, sa.ForeignKey("employee.emp_id", use_alter=True, name="department_head_fk")
        ),
    )
    sa.Table(
        "employee",
        meta,
        sa.Column("emp_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(80), nullable=False),
        sa.Column("title", sa.String(40)),
        sa.Column("dept_id", sa.Integer, sa.ForeignKey("department.dept_id"), nullable=False),
        sa.Column("manager_id", sa.Integer, sa.ForeignKey("employee.emp_id")),
    )
    sa.Table(
        "audit_log",
        meta,
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("emp_id", sa.Integer, sa.ForeignKey("employee.emp_id")),
        sa.Column("message", sa.Text),
    )


def fill_extras(conn: sa.Connection, meta: sa.MetaData, seed: int = 81) -> dict[str, int]:
    rng = random.Random(seed)
    text = Text(rng)
    t = meta.tables
    rows: dict[str, list[dict[str, Any]]] = {
        "currency": [
            {"code": code, "name": name}
            for code, name in [("EUR", "Euro"), ("USD", "US-Dollar"), ("JPY", "Yen|円"), ("GBP", "Pound, sterling")]
        ],
        "author": [
            {"author_id": i, "name": text(100), "bio": None if i % 4 == 0 else text(2000)} for i in range(1, 13)
        ],
    }
    rows["book"] = [
        {
            "book_id": i,
            "title": text(200),
            "blurb": None if i % 5 == 0 else " ".join(text(500) or "" for _ in range(3)),
            "cover": bytes(rng.randrange(256) for _ in range(64)) if i % 2 else None,
            "published": None if i % 6 == 0 else dt.date(1990, 1, 1) + dt.timedelta(days=rng.randint(0, 12000)),
            "currency_code": None if i % 7 == 0 else rng.choice(rows["currency"])["code"],
        }
        for i in range(1, 16)
    ]
    pairs = sorted({(b, a) for b in range(1, 16) for a in rng.sample(range(1, 13), rng.randint(0, 3))})
    rows["book_author"] = [{"book_id": b, "author_id": a} for b, a in pairs]
    rows["department"] = [{"dept_id": d, "name": text(60), "head_emp_id": None} for d in range(1, 5)]
    # managers come first: every employee's manager has a smaller id (or none)
    rows["employee"] = [
        {
            "emp_id": e,
            "name": text(80),
            "title": text(40, null_every=3),
            "dept_id": 1 + e % 4,
            "manager_id": None if e <= 2 else rng.randint(1, e - 1),
        }
        for e in range(1, 21)
    ]
    rows["audit_log"] = [
        {
            "at": dt.datetime(2024, 1, 1) + dt.timedelta(minutes=7 * i),
            "emp_id": None if i % 6 == 0 else rng.randint(1, 20),
            "message": text(300),
        }
        for i in range(30)
    ]
    for name in ("currency", "author", "book", "book_author", "department", "employee", "audit_log"):
        conn.execute(t[name].insert(), rows[name])
    for d in range(1, 4):  # department 4 has no head
        conn.execute(t["department"].update().where(t["department"].c.dept_id == d).values(head_emp_id=d * 5))
    return {name: len(r) for name, r in rows.items()}


def load_rich_schema(engine: sa.Engine) -> dict[str, int]:
    """TPC-H and the extras in one database; returns the row count per table."""
    from tests.scaffold.tpch import define_tpch, fill_tpch

    meta = sa.MetaData()
    define_tpch(meta)
    define_extras(meta)
    meta.create_all(engine)
    with engine.begin() as conn:
        counts = fill_tpch(conn, meta)
        counts.update(fill_extras(conn, meta))
    return counts

"""The campaign's shop and the writer that changes it throughout a trial.

The keys are chosen to break careless code: text keys under a real collation (ICU on PostgreSQL,
case- and accent-insensitive ``utf8mb4_unicode_ci`` on MariaDB, whose order is not byte order), a
composite key with separators, quotes, tabs and non-ASCII inside it, NULL-able non-key columns,
and a category rename that changes every document of the category (fan-out). Keys stay distinct
under the insensitive collation: each carries a counter.

The writer deletes a product's reviews itself before the product: MariaDB does not write
cascaded foreign-key deletes to the binlog, so an application that relies on them leaves
changes no change capture can see. That is the application's defect, not one to plant here.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from dataclasses import dataclass, field

import sqlalchemy as sa

from sparkindex.config.urls import normalize_url

log = logging.getLogger("chaos.workload")

SHOPS = ["Åland Öy", "o'brien & co", "shop|1", "Straße:7", "a/b\\c", "MiXeD Case", "tab\tshop", "emoji 🎉", "x,y;z"]
WORDS = ["alpha", "Beta", "ÉCLAIR", "delta", "Ωmega", 'quote"s', "pipe|x", "colon:y", "zeta", "naïve"]
CATEGORIES = 30

PG_DDL = [
    'CREATE TABLE categories (code text COLLATE "und-x-icu" PRIMARY KEY, title text NOT NULL, note text)',
    'CREATE TABLE products (shop text COLLATE "und-x-icu" NOT NULL, sku text COLLATE "und-x-icu" NOT NULL, '
    "category text REFERENCES categories(code), name text NOT NULL, price numeric(12,2), note text, "
    "PRIMARY KEY (shop, sku))",
    'CREATE TABLE reviews (id bigint PRIMARY KEY, shop text COLLATE "und-x-icu" NOT NULL, '
    'sku text COLLATE "und-x-icu" NOT NULL, stars integer, body text, '
    "FOREIGN KEY (shop, sku) REFERENCES products(shop, sku))",
    "CREATE INDEX reviews_product ON reviews (shop, sku)",
    "CREATE INDEX products_category ON products (category)",
    # deletes must reveal the foreign keys, so the parent documents of a deleted child are found
    "ALTER TABLE products REPLICA IDENTITY FULL",
    "ALTER TABLE reviews REPLICA IDENTITY FULL",
]
_CI = "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
MARIADB_DDL = [
    f"CREATE TABLE categories (code varchar(64) {_CI} PRIMARY KEY, title varchar(200) NOT NULL, note text) "
    "ENGINE=InnoDB",
    f"CREATE TABLE products (shop varchar(64) {_CI} NOT NULL, sku varchar(120) {_CI} NOT NULL, "
    f"category varchar(64) {_CI}, name varchar(200) NOT NULL, price decimal(12,2), note text, "
    "PRIMARY KEY (shop, sku), KEY products_category (category), "
    "FOREIGN KEY (category) REFERENCES categories(code)) ENGINE=InnoDB",
    f"CREATE TABLE reviews (id bigint PRIMARY KEY, shop varchar(64) {_CI} NOT NULL, sku varchar(120) {_CI} NOT NULL, "
    "stars integer, body text, KEY reviews_product (shop, sku), "
    "FOREIGN KEY (shop, sku) REFERENCES products(shop, sku)) ENGINE=InnoDB",
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


SEPARATORS = ["", "|", ":", "/", " ", "\\", ","]


def _sku(rng: random.Random, n: int) -> str:
    return f"{rng.choice(WORDS)}-{n:06d}{rng.choice(SEPARATORS)}{rng.choice(['', 'Ä', 'x'])}"


@dataclass
class ShopState:
    """What the writer believes exists (a statement whose outcome was lost in a restart may make
    it wrong; every operation copes with a row that is not there)."""

    categories: list[str] = field(default_factory=list)
    products: list[tuple[str, str]] = field(default_factory=list)
    reviews: dict[int, tuple[str, str]] = field(default_factory=dict)
    next_sku: int = 0
    next_review: int = 1


def create_shop(url: str, dialect: str, products: int, rng: random.Random) -> ShopState:
    """Create the schema in the (empty) database at *url* and fill it; returns the writer's state."""
    engine = sa.create_engine(normalize_url(url))
    state = ShopState()
    try:
        with engine.begin() as conn:
            for statement in PG_DDL if dialect == "postgres" else MARIADB_DDL:
                conn.exec_driver_sql(statement)
            cats = [
                {"code": f"Cat-{i:03d} {rng.choice(['é', 'E', 'ß', '|', ''])}", "title": _text(rng, 2), "note": None}
                for i in range(CATEGORIES)
            ]
            conn.execute(sa.text("INSERT INTO categories VALUES (:code, :title, :note)"), cats)
            state.categories = [c["code"] for c in cats]
            rows, reviews = [], []
            for _ in range(products):
                key = (rng.choice(SHOPS), _sku(rng, state.next_sku))
                state.next_sku += 1
                rows.append(_product_row(rng, key, state))
                for _ in range(rng.randint(0, 4)):
                    reviews.append(_review_row(rng, state.next_review, key))
                    state.reviews[state.next_review] = key
                    state.next_review += 1
                state.products.append(key)
            conn.execute(sa.text("INSERT INTO products VALUES (:shop, :sku, :category, :name, :price, :note)"), rows)
            conn.execute(sa.text("INSERT INTO reviews VALUES (:id, :shop, :sku, :stars, :body)"), reviews)
    finally:
        engine.dispose()
    return state


def _product_row(rng: random.Random, key: tuple[str, str], state: ShopState) -> dict[str, object]:
    return {
        "shop": key[0],
        "sku": key[1],
        "category": rng.choice(state.categories) if rng.random() < 0.9 else None,
        "name": _text(rng, 3),
        "price": None if rng.random() < 0.2 else round(rng.uniform(0, 9999), 2),
        "note": None if rng.random() < 0.5 else _text(rng, 6),
    }


def _review_row(rng: random.Random, review_id: int, key: tuple[str, str]) -> dict[str, object]:
    return {
        "id": review_id,
        "shop": key[0],
        "sku": key[1],
        "stars": None if rng.random() < 0.1 else rng.randint(1, 5),
        "body": _text(rng, 8),
    }


class Writer(threading.Thread):
    """Commits inserts, updates (fan-out renames among them) and deletes at about *rate* per
    second until stopped. Errors (a server restarting under it) are counted and the writer goes
    on with a new connection: an application does not stop because its database blinked.

    Any other exception ends the writer and is kept in :attr:`failure`: a trial whose writer died
    early, or never committed, tested its sync and catch-up against no changes at all, and
    :func:`chaos.invariants.writer_wrote` says so rather than let it pass as clean."""

    def __init__(self, url: str, state: ShopState, rng: random.Random, rate: float = 12.0) -> None:
        super().__init__(name="chaos-writer", daemon=True)
        self.engine = sa.create_engine(normalize_url(url), pool_pre_ping=True)
        self.state, self.rng, self.rate = state, rng, rate
        self.committed = 0
        self.errors = 0
        #: what ended the writer before it was stopped ("TypeError: ..."), None while it went on
        self.failure: str | None = None
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=60)
        self.engine.dispose()

    def run(self) -> None:
        ops = [
            (self._insert_product, 30),
            (self._update_product, 25),
            (self._delete_product, 10),
            (self._insert_review, 15),
            (self._update_review, 10),
            (self._delete_review, 5),
            (self._rename_category, 5),
        ]
        funcs, weights = zip(*ops, strict=True)
        while not self._stop_event.wait(1.0 / self.rate):  # a pace, not a synchronisation
            op = self.rng.choices(funcs, weights)[0]
            try:
                with self.engine.begin() as conn:
                    op(conn)
                self.committed += 1
            except sa.exc.DBAPIError as exc:
                self.errors += 1
                log.info("writer: %s failed (%s); going on", op.__name__, str(exc).splitlines()[0][:200])
            except Exception as exc:  # kept for the invariants (writer_wrote): the writer is dead
                log.exception("writer: %s raised; the writer stops", op.__name__)
                self.failure = f"{op.__name__}: {type(exc).__name__}: {exc}"
                return

    def describe(self) -> dict[str, object]:
        return {"committed": self.committed, "errors": self.errors, "failure": self.failure}

    # -- operations --------------------------------------------------------------------------
    def _product(self) -> tuple[str, str] | None:
        return self.rng.choice(self.state.products) if self.state.products else None

    def _insert_product(self, conn: sa.Connection) -> None:
        key = (self.rng.choice(SHOPS), _sku(self.rng, self.state.next_sku))
        self.state.next_sku += 1
        conn.execute(
            sa.text("INSERT INTO products VALUES (:shop, :sku, :category, :name, :price, :note)"),
            _product_row(self.rng, key, self.state),
        )
        for _ in range(self.rng.randint(0, 3)):
            self._add_review(conn, key)
        self.state.products.append(key)

    def _add_review(self, conn: sa.Connection, key: tuple[str, str]) -> None:
        rid = self.state.next_review
        self.state.next_review += 1
        conn.execute(
            sa.text("INSERT INTO reviews VALUES (:id, :shop, :sku, :stars, :body)"), _review_row(self.rng, rid, key)
        )
        self.state.reviews[rid] = key

    def _update_product(self, conn: sa.Connection) -> None:
        key = self._product()
        if key is None:
            return
        row = _product_row(self.rng, key, self.state)
        conn.execute(
            sa.text(
                "UPDATE products SET name = :name, price = :price, note = :note, category = :category "
                "WHERE shop = :shop AND sku = :sku"
            ),
            row,
        )

    def _delete_product(self, conn: sa.Connection) -> None:
        key = self._product()
        if key is None:
            return
        params = {"shop": key[0], "sku": key[1]}
        conn.execute(sa.text("DELETE FROM reviews WHERE shop = :shop AND sku = :sku"), params)
        conn.execute(sa.text("DELETE FROM products WHERE shop = :shop AND sku = :sku"), params)
        with contextlib.suppress(ValueError):
            self.state.products.remove(key)
        for rid in [r for r, k in self.state.reviews.items() if k == key]:
            del self.state.reviews[rid]

    def _insert_review(self, conn: sa.Connection) -> None:
        key = self._product()
        if key is not None:
            exists = conn.execute(
                sa.text("SELECT 1 FROM products WHERE shop = :shop AND sku = :sku"), {"shop": key[0], "sku": key[1]}
            ).first()
            if exists:
                self._add_review(conn, key)

    def _update_review(self, conn: sa.Connection) -> None:
        if self.state.reviews:
            rid = self.rng.choice(list(self.state.reviews))
            conn.execute(
                sa.text("UPDATE reviews SET stars = :stars, body = :body WHERE id = :id"),
                {"id": rid, "stars": self.rng.choice([None, 1, 2, 3, 4, 5]), "body": _text(self.rng, 5)},
            )

    def _delete_review(self, conn: sa.Connection) -> None:
        if self.state.reviews:
            rid = self.rng.choice(list(self.state.reviews))
            conn.execute(sa.text("DELETE FROM reviews WHERE id = :id"), {"id": rid})
            del self.state.reviews[rid]

    def _rename_category(self, conn: sa.Connection) -> None:
        code = self.rng.choice(self.state.categories)
        conn.execute(
            sa.text("UPDATE categories SET title = :title, note = :note WHERE code = :code"),
            {
                "code": code,
                "title": _text(self.rng, 2),
                "note": None if self.rng.random() < 0.5 else _text(self.rng, 3),
            },
        )

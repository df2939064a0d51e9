"""The fixture database of the source conformance suite: one schema, one data set, every dialect.

The schema is declared once with SQLAlchemy Core and created with ``metadata.create_all`` on
SQLite, PostgreSQL and MariaDB alike; the rows come from ``random.Random(SEED)``, so every
dialect holds exactly the same data and the tests can recompute what the source must return.

Tables:

* the shop: ``categories``, ``users``, ``products`` (``category_id`` -> categories) and
  ``reviews`` (``product_id`` -> products, ``author_id`` -> users);
* ``tokens``: a UUID primary key (PostgreSQL's native ``uuid``; ``VARCHAR(36)`` elsewhere);
* ``order_lines``: a composite primary key ``(order_no INTEGER, line VARCHAR)``;
* ``employees``: a self-referencing foreign key ``manager_id`` -> ``employees.id``;
* hostile keys, so partitioning and paging must follow the database's collation, not Python's:
  ``labels`` (a text primary key of mixed case, accents and punctuation including ``|`` and
  ``\\``, under ICU ``en-US-x-icu`` on PostgreSQL and ``utf8mb4_unicode_ci`` on MariaDB, plus a
  NOT NULL unique constraint, a NOT NULL unique index, a NULL-able unique column and a
  non-unique column), ``amounts`` (a NUMERIC primary key) and ``blobs`` (a bytes primary key).
  ``order_lines.line`` uses the same collations and holds such codes too.

Nullable columns hold NULLs, text columns hold unicode (combining marks, emoji, ZWJ sequences,
right-to-left scripts, quotes, control whitespace, trailing blanks) and one product description
and one review body are 200 KB each.

Rows are inserted in shuffled order (except ``employees``, whose managers must exist first), so
a read that forgets its ``ORDER BY`` shows on heap-ordered tables.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import random
import unicodedata
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

SEED = 20240917

N_CATEGORIES = 24
N_USERS = 600
N_PRODUCTS = 3000
N_REVIEWS = 9000
N_TOKENS = 5000
N_ORDERS = 800
N_EMPLOYEES = 300

UNICODE = "Grüße 東京 🚀 ü"
UNICODE_SAMPLES = [
    UNICODE,
    "Gru\u0308ße decomposed u\u0308 (NFD, must not be normalised)",
    "family 👩\u200d👩\u200d👧\u200d👦 and flags 🇩🇪🇯🇵",
    "right-to-left עברית العربية mixed",
    "math \U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 (fraktur) and CJK 漢字かなカナ 한국어",
    "quotes \" ' ` backslash \\ tab\tnewline\ncarriage\rreturn",
    "trailing blanks   ",
    "  leading blanks",
    "",
]
BIG_TEXT_CHARS = 200 * 1024
BIG_PRODUCT_ID = 1234
BIG_REVIEW_ID = 4321

#: Line codes of the composite key: mixed case, punctuation, the id separator ``|`` and its escape
#: ``\\``. Under ICU and utf8mb4_unicode_ci they sort unlike Python (case and accents are weighed
#: after letters); they stay distinct under a case- and accent-insensitive comparison.
LINE_CODES = ["A", "b", "B10", "b2", "a-1", "A_2", "c.1", "C|1", "c|", "x\\9", "\\", "Z z", "é1", "|"]

#: Collations of the hostile text keys, per dialect (SQLite compares bytes).
PG_COLLATION = "en-US-x-icu"
MYSQL_COLLATION = "utf8mb4_unicode_ci"
N_LABELS = 6000
N_AMOUNTS = 1500
N_BLOBS = 1500
#: Characters of the ``labels`` keys: both cases, accents, punctuation, the separator and escape.
LABEL_ALPHABET = "aAbBcCxXyYzZ019-_.,'!|\\/ éÉüÜ"

WORDS = [
    "solid",
    "light",
    "wooden",
    "steel",
    "compact",
    "quiet",
    "wireless",
    "portable",
    "classic",
    "modern",
    "lamp",
    "chair",
    "desk",
    "kettle",
    "speaker",
    "jacket",
    "backpack",
    "bottle",
]
BIG_WORDS = [*WORDS, "Grüße", "東京", "🚀", "ü", "u\u0308", "👩\u200d👧", "עברית", "\n", "\t", '"', "\\"]
COUNTRIES = ["DE", "FR", "US", "GB", "JP", "BR", "IN", "NL"]
BASE_TIME = dt.datetime(2019, 3, 4, 5, 6, 7)

#: Tables in dependency order (parents first).
TABLES = ["categories", "users", "products", "reviews", "tokens", "order_lines", "employees"]
#: Tables with hostile keys (no foreign keys; loaded after TABLES).
HOSTILE_TABLES = ["labels", "amounts", "blobs"]
ALL_TABLES = [*TABLES, *HOSTILE_TABLES]

Row = dict[str, Any]


def metadata() -> sa.MetaData:
    """The fixture schema, portable across the three dialects."""
    md = sa.MetaData()
    # MySQL's TEXT holds 64 KB; the 200 KB values need LONGTEXT there (still a Text type).
    long_text = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
    # PostgreSQL gets its native uuid type; elsewhere the canonical 36-character string, which
    # sorts exactly like PostgreSQL's uuid (byte order of lowercase hex).
    uuid_type = sa.String(36).with_variant(sa.Uuid(as_uuid=False), "postgresql")

    def collated(length: int) -> sa.types.TypeEngine[str]:
        return (
            sa.String(length)
            .with_variant(sa.String(length, collation=PG_COLLATION), "postgresql")
            .with_variant(mysql.VARCHAR(length, collation=MYSQL_COLLATION), "mysql", "mariadb")
        )

    sa.Table(
        "categories",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("description", sa.Text, nullable=True),
    )
    sa.Table(
        "users",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("country", sa.String(2), nullable=True),
        sa.Column("bio", sa.Text, nullable=True),
    )
    sa.Table(
        "products",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("sku", sa.String(32), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("summary", sa.String(1000), nullable=True),
        sa.Column("description", long_text, nullable=True),
        sa.Column("price", sa.Numeric(10, 2), nullable=False),
        sa.Column("weight", sa.Double, nullable=True),
        sa.Column("in_stock", sa.Boolean, nullable=True),
        sa.Column("stock", sa.Integer, nullable=False),
        sa.Column("category_id", sa.Integer, sa.ForeignKey("categories.id"), nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=True),
    )
    sa.Table(
        "reviews",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("product_id", sa.Integer, sa.ForeignKey("products.id"), nullable=False, index=True),
        sa.Column("author_id", sa.Integer, sa.ForeignKey("users.id"), nullable=True),
        sa.Column("rating", sa.SmallInteger, nullable=False),
        sa.Column("body", long_text, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    sa.Table(
        "tokens",
        md,
        sa.Column("id", uuid_type, primary_key=True),
        sa.Column("label", sa.String(64), nullable=False),
        sa.Column("score", sa.Double, nullable=True),
        sa.Column("issued_at", sa.DateTime, nullable=False),
    )
    sa.Table(
        "order_lines",
        md,
        sa.Column("order_no", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("line", collated(16), primary_key=True),
        sa.Column("qty", sa.Integer, nullable=False),
        sa.Column("note", sa.Text, nullable=True),
    )
    sa.Table(
        "employees",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("manager_id", sa.Integer, sa.ForeignKey("employees.id"), nullable=True),
    )
    sa.Table(
        "labels",
        md,
        sa.Column("code", collated(64), primary_key=True),
        sa.Column("slug", sa.String(64), nullable=False),
        sa.Column("ref", sa.Integer, nullable=False),
        sa.Column("alt", collated(64), nullable=True),  # unique, but NULL-able
        sa.Column("n", sa.Integer, nullable=False),  # not unique
        sa.UniqueConstraint("slug", name="labels_slug_key"),
        sa.Index("labels_ref_idx", "ref", unique=True),
        sa.UniqueConstraint("alt", name="labels_alt_key"),
    )
    sa.Table(
        "amounts",
        md,
        sa.Column("amount", sa.Numeric(12, 3), primary_key=True, autoincrement=False),
        sa.Column("label", sa.String(64), nullable=False),
    )
    sa.Table(
        "blobs",
        md,
        sa.Column("digest", sa.LargeBinary().with_variant(mysql.VARBINARY(16), "mysql", "mariadb"), primary_key=True),
        sa.Column("label", sa.String(64), nullable=False),
    )
    return md


def fold(text: str) -> str:
    """What a case- and accent-insensitive PAD SPACE collation compares: equal folds, equal keys."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower().rstrip(" ")


def _labels(rng: random.Random) -> list[Row]:
    codes: dict[str, str] = {}
    while len(codes) < N_LABELS:
        code = "".join(rng.choice(LABEL_ALPHABET) for _ in range(rng.randint(1, 8))).strip(" ")
        if code:
            codes.setdefault(fold(code), code)
    return [
        {
            "code": code,
            "slug": f"slug-{i:05d}",
            "ref": N_LABELS - i,
            "alt": None if i % 3 == 0 else f"alt|{i}",
            "n": i % 50,
        }
        for i, code in enumerate(codes.values())
    ]


def _big_text(rng: random.Random, marker: str) -> str:
    parts = [marker]
    size = len(marker)
    while size < BIG_TEXT_CHARS:
        word = rng.choice(BIG_WORDS)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)[:BIG_TEXT_CHARS]


def _text(rng: random.Random, null_share: float) -> str | None:
    """NULL, a unicode sample or a few plain words."""
    r = rng.random()
    if r < null_share:
        return None
    if r < null_share + 0.05:
        return rng.choice(UNICODE_SAMPLES)
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12)))


def _when(rng: random.Random) -> dt.datetime:
    # Whole seconds: MySQL's DATETIME (no fractional precision) would drop microseconds.
    return BASE_TIME + dt.timedelta(seconds=rng.randrange(5 * 365 * 86400))


@functools.cache
def rows() -> dict[str, list[Row]]:
    """Every table's rows, as inserted (insertion order is shuffled, see the module docstring)."""
    rng = random.Random(SEED)
    data: dict[str, list[Row]] = {}

    data["categories"] = [
        {
            "id": i,
            "name": UNICODE if i == 3 else f"{rng.choice(WORDS)} {i}",
            "description": None if i % 4 == 0 else _text(rng, 0.0),
        }
        for i in range(1, N_CATEGORIES + 1)
    ]
    data["users"] = [
        {
            "id": i,
            "name": rng.choice(UNICODE_SAMPLES[:5]) if i % 50 == 0 else f"user{i:04d}",
            "country": None if rng.random() < 0.1 else rng.choice(COUNTRIES),
            "bio": _text(rng, 0.3),
        }
        for i in range(1, N_USERS + 1)
    ]
    products = []
    for i in range(1, N_PRODUCTS + 1):
        products.append(
            {
                "id": i,
                "sku": f"SKU-{i:05d}",
                "name": UNICODE if i % 97 == 0 else f"{rng.choice(WORDS)} {rng.choice(WORDS)} {i}",
                "summary": _text(rng, 0.2),
                "description": _big_text(rng, "product") if i == BIG_PRODUCT_ID else _text(rng, 0.15),
                "price": decimal.Decimal(rng.randint(1, 9_999_999)).scaleb(-2),
                # Full-precision doubles (not two-decimal values) so a lossy float path shows.
                "weight": None if rng.random() < 0.1 else rng.uniform(0.001, 250.0),
                "in_stock": rng.choice([True, False, None]),
                "stock": rng.randint(0, 10_000),
                "category_id": None if rng.random() < 0.05 else rng.randint(1, N_CATEGORIES),
                "created_at": _when(rng),
                "updated_at": None if rng.random() < 0.3 else _when(rng),
            }
        )
    data["products"] = products
    data["reviews"] = [
        {
            "id": i,
            "product_id": rng.randint(1, N_PRODUCTS),
            "author_id": None if rng.random() < 0.03 else rng.randint(1, N_USERS),
            "rating": rng.randint(1, 5),
            "body": _big_text(rng, "review") if i == BIG_REVIEW_ID else _text(rng, 0.1),
            "created_at": _when(rng),
        }
        for i in range(1, N_REVIEWS + 1)
    ]
    tokens: dict[str, Row] = {}
    while len(tokens) < N_TOKENS:
        tid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        tokens[tid] = {
            "id": tid,
            "label": f"token {len(tokens)}",
            "score": None if rng.random() < 0.2 else rng.uniform(-1.0, 1.0),
            "issued_at": _when(rng),
        }
    data["tokens"] = list(tokens.values())
    lines = []
    for order_no in range(1, N_ORDERS + 1):
        for line in sorted(rng.sample(LINE_CODES, rng.randint(1, 6))):
            lines.append({"order_no": order_no, "line": line, "qty": rng.randint(1, 20), "note": _text(rng, 0.5)})
    data["order_lines"] = lines
    data["employees"] = [
        {
            "id": i,
            "name": UNICODE if i == 7 else f"employee {i}",
            "manager_id": None if i <= 3 else rng.randint(1, i - 1),
        }
        for i in range(1, N_EMPLOYEES + 1)
    ]
    data["labels"] = _labels(rng)
    amounts = {decimal.Decimal(rng.randint(-(10**8), 10**8)).scaleb(-3) for _ in range(N_AMOUNTS * 2)}
    data["amounts"] = [{"amount": a, "label": f"amount {a}"} for a in sorted(amounts)[:N_AMOUNTS]]
    blobs = {rng.randbytes(rng.randint(1, 16)) for _ in range(N_BLOBS * 2)}
    data["blobs"] = [{"digest": b, "label": f"blob {b.hex()}"} for b in sorted(blobs)[:N_BLOBS]]
    for name in ALL_TABLES:
        if name != "employees":  # managers must be inserted before their reports
            rng.shuffle(data[name])
    return data


@functools.cache
def sorted_rows(table: str, key: tuple[str, ...]) -> list[Row]:
    """A table's rows in primary key order (cached: treat as read-only)."""
    return sorted(rows()[table], key=lambda r: tuple(r[k] for k in key))


def load(engine: sa.Engine) -> None:
    """Create the schema in the engine's (empty) database and insert every row."""
    md = metadata()
    md.create_all(engine)
    data = rows()
    with engine.begin() as conn:
        for name in ALL_TABLES:
            conn.execute(md.tables[name].insert(), data[name])

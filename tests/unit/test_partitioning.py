"""Splitting key spaces into ranges, keyset reads over them, and the partition calculator.

Every table is a real SQLite file in ``tmp_path``; ranges are checked by reading them back with the
same keyset pages the job reader uses.
"""

from __future__ import annotations

import itertools
import math
import random
import sqlite3
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sparkindex.config.indexes import IndexConfig
from sparkindex.config.job import JobConfig
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange, Source, TableInfo
from sparkindex.sources.partition_plan import EntityPlanInput, plan_partitions
from sparkindex.sources.partitioning import distinct_in_order, integer_ranges, ranges_from_boundaries

# -- helpers -----------------------------------------------------------------------------------------


def in_range(rng: KeyRange, key: tuple[Any, ...]) -> bool:
    """The documented semantics: ``after < key <= upto``, a ``None`` end is open."""
    return (rng.after is None or key > rng.after) and (rng.upto is None or key <= rng.upto)


def make_db(path: Path, ddl: str, insert: str, rows: Sequence[tuple[Any, ...]]) -> str:
    conn = sqlite3.connect(path)
    conn.execute(ddl)
    conn.executemany(insert, rows)
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


def read_range(
    source: Source, info: TableInfo, key: list[str], columns: list[str], rng: KeyRange, page: int
) -> list[tuple[Any, ...]]:
    """Every row of *rng*, page by page, the way the job reader walks a partition."""
    out: list[tuple[Any, ...]] = []
    after: tuple[Any, ...] | None = None
    kpos = [columns.index(k) for k in key]
    for _ in range(1_000_000):
        rows = source.read_page(info, key, columns, rng, after, page)
        assert len(rows) <= page
        if not rows:
            return out
        out.extend(rows)
        after = tuple(rows[-1][i] for i in kpos)
    raise AssertionError("keyset loop did not terminate")


@pytest.fixture
def sources() -> Iterator[list[Source]]:
    opened: list[Source] = []
    yield opened
    for s in opened:
        s.close()


def opened(sources: list[Source], url: str) -> Source:
    s = open_source_url(url)
    sources.append(s)
    return s


# -- integer_ranges ----------------------------------------------------------------------------------

CASES = [
    (1, 10, 1),
    (1, 10, 2),
    (1, 10, 3),
    (1, 10, 4),
    (1, 10, 10),
    (1, 10, 11),
    (1, 3, 10),
    (5, 5, 3),
    (0, 0, 1),
    (-50, 50, 7),
    (-10, -1, 3),
    (1, 100, 7),
    (17, 10_017, 13),
    (1, 2, 0),  # parts below 1 means one range
    (1000, 1999, 10),
]


@pytest.mark.parametrize(("lo", "hi", "parts"), CASES)
def test_integer_ranges_are_contiguous_with_open_ends(lo: int, hi: int, parts: int) -> None:
    ranges = integer_ranges(lo, hi, parts)
    assert 1 <= len(ranges) <= max(1, parts)
    assert ranges[0].after is None
    assert ranges[-1].upto is None
    for prev, nxt in itertools.pairwise(ranges):
        assert prev.upto is not None
        assert prev.upto == nxt.after
        assert len(prev.upto) == 1 and isinstance(prev.upto[0], int)
    bounds = [r.upto[0] for r in ranges[:-1] if r.upto is not None]
    assert bounds == sorted(set(bounds)), "boundaries must strictly increase"


@pytest.mark.parametrize(("lo", "hi", "parts"), CASES)
def test_integer_ranges_cover_every_key_exactly_once(lo: int, hi: int, parts: int) -> None:
    ranges = integer_ranges(lo, hi, parts)
    hits: Counter[int] = Counter()
    for k in range(lo - 5, hi + 6):  # a little beyond both extremes: the open ends catch those
        owners = [i for i, r in enumerate(ranges) if in_range(r, (k,))]
        assert len(owners) == 1, f"key {k} falls in ranges {owners} of {ranges}"
        hits[owners[0]] += 1 if lo <= k <= hi else 0
    # no range is empty within [lo, hi]
    assert all(hits[i] > 0 for i in range(len(ranges))), hits


def test_integer_ranges_are_balanced() -> None:
    ranges = integer_ranges(1, 10_000, 10)
    assert len(ranges) == 10
    sizes = [sum(1 for k in range(1, 10_001) if in_range(r, (k,))) for r in ranges]
    assert sizes == [1000] * 10


def test_ranges_from_boundaries_open_at_both_ends() -> None:
    assert ranges_from_boundaries([]) == [KeyRange(None, None)]
    assert ranges_from_boundaries([("b",), ("d",)]) == [
        KeyRange(None, ("b",)),
        KeyRange(("b",), ("d",)),
        KeyRange(("d",), None),
    ]


# -- integer primary keys ----------------------------------------------------------------------------


@pytest.fixture
def int_table(tmp_path: Path) -> tuple[str, list[int]]:
    """10,000 rows whose ids have gaps (and a sprinkle of negative ids)."""
    rnd = random.Random(7)
    ids: list[int] = []
    k = -40
    while len(ids) < 10_000:
        k += rnd.choice((1, 1, 1, 2, 3, 7))
        ids.append(k)
    url = make_db(
        tmp_path / "ints.db",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, label TEXT)",
        "INSERT INTO items VALUES (?, ?)",
        [(i, f"item {i}") for i in ids],
    )
    return url, ids


def test_integer_split_gives_about_size_rows_per_range(sources: list[Source], int_table: tuple[str, list[int]]) -> None:
    url, _ = int_table
    source = opened(sources, url)
    info = source.table("items")
    ranges = source.split_keys(info, ["id"], size=1000, limit=50)
    assert 8 <= len(ranges) <= 12
    assert ranges[0].after is None and ranges[-1].upto is None
    for prev, nxt in itertools.pairwise(ranges):
        assert prev.upto == nxt.after


def test_integer_ranges_read_back_every_row_exactly_once(
    sources: list[Source], int_table: tuple[str, list[int]]
) -> None:
    url, ids = int_table
    source = opened(sources, url)
    info = source.table("items")
    ranges = source.split_keys(info, ["id"], size=1000, limit=50)
    seen: list[int] = []
    for rng in ranges:
        rows = read_range(source, info, ["id"], ["id"], rng, page=333)
        keys = [r[0] for r in rows]
        assert keys == sorted(keys)
        assert all(in_range(rng, (k,)) for k in keys)
        seen.extend(keys)
    assert len(seen) == len(ids)
    assert Counter(seen) == Counter(ids)


def test_integer_open_ends_catch_rows_inserted_after_planning(
    sources: list[Source], int_table: tuple[str, list[int]], tmp_path: Path
) -> None:
    url, ids = int_table
    source = opened(sources, url)
    info = source.table("items")
    ranges = source.split_keys(info, ["id"], size=1000, limit=50)
    conn = sqlite3.connect(tmp_path / "ints.db")
    conn.executemany("INSERT INTO items VALUES (?, ?)", [(min(ids) - 100, "low"), (max(ids) + 100, "high")])
    conn.commit()
    conn.close()
    first = [r[0] for r in read_range(source, info, ["id"], ["id"], ranges[0], page=500)]
    last = [r[0] for r in read_range(source, info, ["id"], ["id"], ranges[-1], page=500)]
    assert min(ids) - 100 in first
    assert max(ids) + 100 in last


def test_integer_split_limit_caps_ranges(sources: list[Source], int_table: tuple[str, list[int]]) -> None:
    url, _ = int_table
    source = opened(sources, url)
    info = source.table("items")
    assert len(source.split_keys(info, ["id"], size=10, limit=7)) == 7
    assert len(source.split_keys(info, ["id"], size=100_000, limit=50)) == 1


def test_empty_table_is_one_open_range(sources: list[Source], tmp_path: Path) -> None:
    url = make_db(tmp_path / "empty.db", "CREATE TABLE t (id INTEGER PRIMARY KEY)", "INSERT INTO t VALUES (?)", [])
    source = opened(sources, url)
    assert source.split_keys(source.table("t"), ["id"], size=10, limit=50) == [KeyRange(None, None)]


# -- string and composite keys -----------------------------------------------------------------------


@pytest.fixture
def uuid_table(tmp_path: Path) -> tuple[str, list[str]]:
    rnd = random.Random(11)
    keys = [str(uuid.UUID(int=rnd.getrandbits(128), version=4)) for _ in range(5000)]
    url = make_db(
        tmp_path / "uuids.db",
        "CREATE TABLE tokens (id TEXT PRIMARY KEY, label TEXT)",
        "INSERT INTO tokens VALUES (?, ?)",
        [(k, f"label {i}") for i, k in enumerate(keys)],
    )
    return url, keys


@pytest.fixture
def composite_table(tmp_path: Path) -> tuple[str, list[tuple[int, str]]]:
    rnd = random.Random(13)
    keys: set[tuple[int, str]] = set()
    while len(keys) < 6000:
        # skewed first column: a handful of 'a' values carry most rows, so splitting by 'a' alone fails
        a = rnd.choice([1, 1, 1, 1, 2, 2, 3, 5, 8, 13])
        keys.add((a, "".join(rnd.choice("abcxyzÄé東") for _ in range(6))))
    rows = sorted(keys)
    rnd.shuffle(rows)
    url = make_db(
        tmp_path / "composite.db",
        "CREATE TABLE pairs (a INTEGER NOT NULL, b TEXT NOT NULL, v TEXT, PRIMARY KEY (a, b))",
        "INSERT INTO pairs VALUES (?, ?, ?)",
        [(a, b, f"{a}/{b}") for a, b in rows],
    )
    return url, list(keys)


def check_balanced_and_complete(
    source: Source,
    info: TableInfo,
    key: list[str],
    expected: list[tuple[Any, ...]],
    size: int,
    limit: int,
) -> list[KeyRange]:
    ranges = source.split_keys(info, key, size=size, limit=limit)
    wanted = min(limit, math.ceil(len(expected) / size))
    assert len(ranges) == wanted
    assert ranges[0].after is None and ranges[-1].upto is None
    for prev, nxt in itertools.pairwise(ranges):
        assert prev.upto is not None and prev.upto == nxt.after
    target = len(expected) / len(ranges)
    union: list[tuple[Any, ...]] = []
    for rng in ranges:
        got = [tuple(r) for r in read_range(source, info, key, key, rng, page=257)]
        assert got == sorted(got), "keyset pages must come in key order"
        assert all(in_range(rng, k) for k in got)
        assert 0.5 * target <= len(got) <= 1.5 * target, f"{len(got)} rows in {rng}, target {target:.0f}"
        union.extend(got)
    assert len(union) == len(set(union)) == len(expected)
    assert set(union) == set(expected)
    return ranges


def test_uuid_keys_split_into_balanced_complete_ranges(
    sources: list[Source], uuid_table: tuple[str, list[str]]
) -> None:
    url, keys = uuid_table
    source = opened(sources, url)
    info = source.table("tokens")
    ranges = check_balanced_and_complete(source, info, ["id"], [(k,) for k in keys], size=1000, limit=50)
    assert len(ranges) == 5
    assert all(isinstance(r.upto[0], str) for r in ranges[:-1] if r.upto is not None)


def test_uuid_keys_limit_caps_ranges(sources: list[Source], uuid_table: tuple[str, list[str]]) -> None:
    url, keys = uuid_table
    source = opened(sources, url)
    info = source.table("tokens")
    ranges = check_balanced_and_complete(source, info, ["id"], [(k,) for k in keys], size=100, limit=7)
    assert len(ranges) == 7


def test_composite_keys_split_into_balanced_complete_ranges(
    sources: list[Source], composite_table: tuple[str, list[tuple[int, str]]]
) -> None:
    url, keys = composite_table
    source = opened(sources, url)
    info = source.table("pairs")
    assert info.primary_key == ("a", "b")
    ranges = check_balanced_and_complete(source, info, ["a", "b"], keys, size=1000, limit=50)
    assert len(ranges) == 6
    assert all(r.upto is not None and len(r.upto) == 2 for r in ranges[:-1])


def test_composite_keys_limit_caps_ranges(
    sources: list[Source], composite_table: tuple[str, list[tuple[int, str]]]
) -> None:
    url, keys = composite_table
    source = opened(sources, url)
    info = source.table("pairs")
    ranges = check_balanced_and_complete(source, info, ["a", "b"], keys, size=50, limit=9)
    assert len(ranges) == 9


def test_composite_reads_return_all_columns_in_key_order(
    sources: list[Source], composite_table: tuple[str, list[tuple[int, str]]]
) -> None:
    url, keys = composite_table
    source = opened(sources, url)
    info = source.table("pairs")
    ranges = source.split_keys(info, ["a", "b"], size=2000, limit=50)
    rows: list[tuple[Any, ...]] = []
    for rng in ranges:
        got = read_range(source, info, ["a", "b"], ["v", "a", "b"], rng, page=1000)
        assert [(r[1], r[2]) for r in got] == sorted((r[1], r[2]) for r in got)
        rows.extend(got)
    assert sorted(rows, key=lambda r: (r[1], r[2])) == [(f"{a}/{b}", a, b) for a, b in sorted(keys)]


# -- the partition calculator ------------------------------------------------------------------------


@pytest.fixture
def two_tables(tmp_path: Path) -> str:
    """``big`` (integer key, 1,000 rows) and ``small`` (uuid key, 300 rows)."""
    path = tmp_path / "plan.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE big (id INTEGER PRIMARY KEY, v TEXT)")
    conn.execute("CREATE TABLE small (id TEXT PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO big VALUES (?, ?)", [(i, "x") for i in range(1, 1001)])
    rnd = random.Random(3)
    conn.executemany(
        "INSERT INTO small VALUES (?, ?)", [(str(uuid.UUID(int=rnd.getrandbits(128))), "y") for _ in range(300)]
    )
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


def entity(source: Source, alias: str, table: str, **kw: Any) -> EntityPlanInput:
    info = source.table(table)
    return EntityPlanInput(IndexConfig(alias=alias, table=table, **kw), info, list(info.primary_key))


def test_plan_splits_each_entity_by_partition_size(sources: list[Source], two_tables: str) -> None:
    source = opened(sources, two_tables)
    specs = plan_partitions(
        source,
        [entity(source, "big", "big", partition_size=100), entity(source, "small", "small", partition_size=100)],
        JobConfig(),
    )
    by = Counter(s.entity for s in specs)
    assert by == {"big": 10, "small": 3}
    for alias, n in by.items():
        mine = sorted((s for s in specs if s.entity == alias), key=lambda s: s.partition_index)
        assert [s.partition_index for s in mine] == list(range(n))
        assert mine[0].range_start is None and mine[-1].range_end is None
        for prev, nxt in itertools.pairwise(mine):
            assert prev.range_end == nxt.range_start


def test_plan_respects_max_partitions_per_entity(sources: list[Source], two_tables: str) -> None:
    source = opened(sources, two_tables)
    specs = plan_partitions(
        source,
        [entity(source, "big", "big", partition_size=10), entity(source, "small", "small", partition_size=10)],
        JobConfig(max_partitions_per_entity=4),
    )
    by = Counter(s.entity for s in specs)
    assert by == {"big": 4, "small": 4}
    # the ranges still cover all rows: estimates add up to at least the table
    assert sum(s.estimated_count for s in specs if s.entity == "big") >= 1000
    assert sum(s.estimated_count for s in specs if s.entity == "small") >= 300


def test_plan_scales_down_to_max_total_partitions(sources: list[Source], two_tables: str) -> None:
    source = opened(sources, two_tables)
    # wanted: big 100, small 30 (total 130); the job allows 26, so each gets a fifth
    specs = plan_partitions(
        source,
        [entity(source, "big", "big", partition_size=10), entity(source, "small", "small", partition_size=10)],
        JobConfig(max_total_partitions=26),
    )
    by = Counter(s.entity for s in specs)
    assert len(specs) <= 26
    assert by["big"] == 20
    assert by["small"] == 6
    assert {s.estimated_count for s in specs if s.entity == "big"} == {50}
    assert {s.estimated_count for s in specs if s.entity == "small"} == {50}


def test_plan_scale_down_is_exact_when_the_share_is_whole(sources: list[Source], two_tables: str) -> None:
    """Two entities wanting 22 partitions each under a job limit of 30 get exactly 15 each (22 * 30 / 44)."""
    source = opened(sources, two_tables)
    specs = plan_partitions(
        source,
        [entity(source, "one", "big", partition_size=46), entity(source, "two", "big", partition_size=46)],
        JobConfig(max_total_partitions=30),
    )
    assert Counter(s.entity for s in specs) == {"one": 15, "two": 15}


def test_plan_gives_every_entity_at_least_one_partition(sources: list[Source], two_tables: str) -> None:
    source = opened(sources, two_tables)
    specs = plan_partitions(
        source,
        [entity(source, "big", "big", partition_size=10), entity(source, "small", "small", partition_size=10)],
        JobConfig(max_total_partitions=1),
    )
    assert Counter(s.entity for s in specs) == {"big": 1, "small": 1}
    assert all(s.range_start is None and s.range_end is None for s in specs)


def test_plan_work_units_are_estimate_times_complexity_rounded_up(sources: list[Source], two_tables: str) -> None:
    source = opened(sources, two_tables)
    specs = plan_partitions(
        source,
        [
            entity(source, "big", "big", partition_size=300, complexity=2.5),  # 4 ranges of 250
            entity(source, "small", "small", partition_size=70, complexity=1.75),  # 5 ranges of 60
        ],
        JobConfig(),
    )
    big = [s for s in specs if s.entity == "big"]
    small = [s for s in specs if s.entity == "small"]
    assert len(big) == 4 and {s.estimated_count for s in big} == {250}
    assert {s.work_units for s in big} == {625}
    assert len(small) == 5 and {s.estimated_count for s in small} == {60}
    assert {s.work_units for s in small} == {105}
    # rounded up, not down: 7 ranges of ceil(300/7) = 43 rows at 1.5 -> 64.5 -> 65
    specs = plan_partitions(source, [entity(source, "small", "small", partition_size=43, complexity=1.5)], JobConfig())
    assert len(specs) == 7 and {s.estimated_count for s in specs} == {43}
    assert {s.work_units for s in specs} == {65}


def test_plan_work_units_are_exact_for_decimal_complexity(sources: list[Source], two_tables: str) -> None:
    """complexity 1.1 on 100 rows is 110 work units; binary floating point must not round it up to 111."""
    source = opened(sources, two_tables)
    specs = plan_partitions(source, [entity(source, "big", "big", partition_size=100, complexity=1.1)], JobConfig())
    assert {s.estimated_count for s in specs} == {100}
    expected = math.ceil(Decimal("100") * Decimal("1.1"))
    assert {s.work_units for s in specs} == {expected} == {110}


def test_plan_orders_by_priority_then_work_units(sources: list[Source], two_tables: str) -> None:
    source = opened(sources, two_tables)
    specs = plan_partitions(
        source,
        [
            entity(source, "big", "big", partition_size=100, complexity=1.0, priority=0),  # 10 x 100 wu
            entity(source, "small", "small", partition_size=100, complexity=5.0, priority=0),  # 3 x 500 wu
            entity(source, "urgent", "small", partition_size=150, complexity=1.0, priority=9),  # 2 x 150 wu
        ],
        JobConfig(),
    )
    assert [s.entity for s in specs] == ["urgent"] * 2 + ["small"] * 3 + ["big"] * 10
    keys = [(-s.priority, -s.work_units) for s in specs]
    assert keys == sorted(keys)
    assert [s.work_units for s in specs][:5] == [150, 150, 500, 500, 500]
    assert all(s.priority == 9 for s in specs[:2]) and all(s.priority == 0 for s in specs[2:])


def test_boundaries_keep_the_database_order_and_lose_only_repeats() -> None:
    """Under ICU, 'a-b' < 'A' < 'b' (say); Python's sorted() would reorder them and ranges would overlap."""
    db_order = [("a-b",), ("A",), ("A",), ("b",), ("B_",)]
    assert distinct_in_order(db_order) == [("a-b",), ("A",), ("b",), ("B_",)]
    ranges = ranges_from_boundaries(distinct_in_order(db_order))
    assert [(r.after, r.upto) for r in ranges] == [
        (None, ("a-b",)),
        (("a-b",), ("A",)),
        (("A",), ("b",)),
        (("b",), ("B_",)),
        (("B_",), None),
    ]


def test_sources_never_import_documents() -> None:
    """Documents are built on sources, not the other way round: no import cycle between the packages."""
    import subprocess
    import sys

    code = (
        "import sys, sparkindex.sources, sparkindex.sources.postgres, sparkindex.sources.mysql, "
        "sparkindex.sources.sqlite, sparkindex.sources.partitioning; "
        "print(sorted(m for m in sys.modules if m.startswith('sparkindex.documents')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    package = Path(__file__).parents[2] / "src" / "sparkindex" / "sources"
    assert not [p for p in package.rglob("*.py") if "sparkindex.documents" in p.read_text()]

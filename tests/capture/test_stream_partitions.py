"""How a batch is split into apply tasks: every change of a row (and of the rows linked to it)
lands in one task, so a document is rebuilt once per batch however often it changed; each range
of a key diff is a task of its own."""

from __future__ import annotations

import itertools

import orjson

from sparkindex.capture.stream import CHANGES_PER_TASK, ChangeStreamReader
from sparkindex.sources.change_model import Change, recheck


def test_changes_of_one_row_meet_in_one_task() -> None:
    spec = {
        "consumer": "c",
        "limit": 1,
        "until": None,
        "tables": [
            {"name": "products", "link_columns": ["id"], "where": "id"},
            {"name": "reviews", "link_columns": ["product_id"], "where": "relations[1]"},
        ],
    }
    reader = ChangeStreamReader("", spec, {})
    changes = [Change("products", "update", n, None, {"id": n % 3000, "name": f"n{n}"}) for n in range(12_000)]
    changes += [Change("reviews", "delete", 20_000 + n, {"id": n, "product_id": n % 3000}) for n in range(3000)]
    chunks = reader._by_row(changes)
    assert len(chunks) == -(-len(changes) // CHANGES_PER_TASK)
    assert sum(len(c) for c in chunks) == len(changes)
    home: dict[int, int] = {}
    for i, chunk in enumerate(chunks):
        for row in chunk:
            image = orjson.loads(row[4] or row[3])
            product = image["id"] if row[1] == "products" else image["product_id"]
            assert home.setdefault(product, i) == i, f"product {product} split over tasks"


def test_each_key_diff_range_is_a_task_of_its_own() -> None:
    spec = {"consumer": "c", "limit": 1, "until": None, "tables": [{"name": "products", "link_columns": ["id"]}]}
    reader = ChangeStreamReader("", spec, {})
    edges = [None, "10", "20", "30", None]
    rechecks = [recheck("products", "products", lo, hi, 5) for lo, hi in itertools.pairwise(edges)]
    updates = [Change("products", "update", 6, None, {"id": n}) for n in range(10)]
    chunks = reader._by_row([*updates, *rechecks])
    assert len(chunks) == 1 + len(rechecks)
    assert [Change.from_row(r) for r in chunks[0]] == updates
    assert [[Change.from_row(r) for r in chunk] for chunk in chunks[1:]] == [[c] for c in rechecks]

"""The transform cache on every store: batched lookups, upserts that replace, aliases kept apart,
an embedding-sized diff, forgetting an alias or some of its documents, and what is kept per alias."""

from __future__ import annotations

import time

import orjson

from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.transform_cache import LOOKUP_CHUNK, PUT_CHUNK, CachedAlias


def test_put_then_lookup_and_replace(store: CoordinationStore) -> None:
    cache = store.transform_cache
    assert cache.lookup("products", []) == {}
    assert cache.lookup("products", ["1"]) == {}
    cache.put("products", [("1", "h1", b'{"set":{"e":[0.5]},"unset":[]}'), ("2", "h2", b"{}")])
    cache.put("reviews", [("1", "other", b"{}")])
    assert cache.lookup("products", ["1", "2", "3", "1"]) == {
        "1": ("h1", b'{"set":{"e":[0.5]},"unset":[]}'),
        "2": ("h2", b"{}"),
    }
    # a later run replaces an entry (an upsert, not a second row), and of one id twice the last wins
    cache.put("products", [("2", "stale", b"[]"), ("2", "h2b", b'{"set":{},"unset":["x"]}')])
    assert cache.lookup("products", ["2"]) == {"2": ("h2b", b'{"set":{},"unset":["x"]}')}
    assert cache.lookup("reviews", ["1", "2"]) == {"1": ("other", b"{}")}


def test_many_ids_and_large_diffs(store: CoordinationStore) -> None:
    cache = store.transform_cache
    n = max(LOOKUP_CHUNK, PUT_CHUNK) * 2 + 7
    embedding = orjson.dumps({"set": {"embedding": [i + 0.1234567890123 for i in range(4096)]}, "unset": []})
    assert len(embedding) > 65535, "more than MySQL's TEXT holds"
    cache.put("products", [(f"doc-{i}", f"h{i}", embedding if i % 97 == 0 else b"{}") for i in range(n)])
    found = cache.lookup("products", [f"doc-{i}" for i in range(n + 5)])
    assert len(found) == n
    assert found["doc-97"] == ("h97", embedding)
    assert found["doc-98"] == ("h98", b"{}")


def test_forget_an_alias(store: CoordinationStore) -> None:
    cache = store.transform_cache
    cache.put("products", [("1", "h", b"{}"), ("2", "h", b"{}")])
    cache.put("reviews", [("1", "h", b"{}")])
    assert cache.forget("products") == 2
    assert cache.lookup("products", ["1", "2"]) == {}
    assert cache.lookup("reviews", ["1"]) == {"1": ("h", b"{}")}
    assert cache.forget("products") == 0


def test_forget_some_ids(store: CoordinationStore) -> None:
    cache = store.transform_cache
    n = LOOKUP_CHUNK * 2 + 3  # more ids than one delete takes
    cache.put("products", [(f"doc-{i}", "h", b"{}") for i in range(n)])
    cache.put("reviews", [("doc-1", "h", b"{}")])
    assert cache.forget_ids("products", []) == 0
    gone = [f"doc-{i}" for i in range(0, n, 2)]
    assert cache.forget_ids("products", [*gone, "doc-1", "doc-1", "never-there"]) == len(gone) + 1
    left = cache.lookup("products", [f"doc-{i}" for i in range(n)])
    assert sorted(left) == sorted(f"doc-{i}" for i in range(3, n, 2))
    assert cache.lookup("reviews", ["doc-1"]) == {"doc-1": ("h", b"{}")}, "another alias's entry of that id stays"
    assert cache.forget_ids("products", gone) == 0


def test_what_is_kept_per_alias(store: CoordinationStore) -> None:
    cache = store.transform_cache
    assert cache.aliases() == {}
    before = time.time()
    cache.put("products", [("1", "h", b"{}"), ("2", "h", b"{}")])
    cache.put("reviews", [("1", "h", b"{}")])
    kept = cache.aliases()
    assert sorted(kept) == ["products", "reviews"]
    assert kept["products"].entries == 2 and kept["reviews"] == CachedAlias(1, kept["reviews"].newest)
    assert before <= kept["products"].newest <= time.time()
    cache.forget("reviews")
    assert list(cache.aliases()) == ["products"]

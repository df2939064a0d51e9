"""Per-document transforms (documents/transform.py): identity, per-document failures, import
errors, and ``on_change`` served from a real SQLite coordination store's transform cache."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import toy_embedding

from sparkindex.config.indexes import IndexConfig, TransformConfig
from sparkindex.coordination.store import CoordinationStore
from sparkindex.documents.hashing import dumps_document
from sparkindex.documents.transform import DocumentTransform, apply_diff, make_diff
from sparkindex.errors import ConfigError, DocumentError, TransientError
from sparkindex.resources import open_store_url

TOY = "tests.support.toy_embedding"


def products(n: int = 10) -> list[tuple[str, dict[str, Any]]]:
    return [
        (str(i), {"id": i, "name": f"lamp {i}", "description": "a warm light", "price": 1.5 * i})
        for i in range(1, n + 1)
    ]


def transform(fn: str, cache: Any = None, **settings: Any) -> DocumentTransform:
    return DocumentTransform(TransformConfig(function=f"{TOY}:{fn}", **settings), "products", cache)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CoordinationStore]:
    with open_store_url(f"sqlite:///{tmp_path / 'state.db'}") as s:
        yield s


@pytest.fixture
def embed_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "embed.log"
    monkeypatch.setenv(toy_embedding.LOG_ENV, str(path))
    return path


def test_identity_is_module_function_and_version() -> None:
    assert transform("embed").identity == f"{TOY}:embed@1"
    assert transform("embed", version="2024-06").identity == f"{TOY}:embed@2024-06"
    shorthand = IndexConfig.model_validate({"alias": "p", "table": "products", "transform": f"{TOY}:versioned"})
    assert shorthand.transform is not None
    assert DocumentTransform(shorthand.transform, "p").identity == f"{TOY}:versioned@1"


def test_without_on_change_every_document_is_transformed(embed_log: Path) -> None:
    t = transform("embed")
    out = t.apply(products(3))
    assert [d["id"] for d in out if isinstance(d, dict)] == [1, 2, 3]
    assert all(isinstance(d, dict) and len(d["embedding"]) == 8 for d in out)
    t.apply(products(3))
    assert (t.calls, t.hits) == (6, 0)
    assert toy_embedding.logged_calls(embed_log) == ["1", "2", "3"] * 2


def test_an_exception_fails_its_document_only() -> None:
    t = transform("raising")
    out = t.apply(products(15))
    failed = {e.doc_id: e for e in out if isinstance(e, DocumentError)}
    assert sorted(failed) == ["14", "7"]
    assert failed["7"].reason == "ValueError: bad row 7"
    assert failed["7"].error_class == "TransformError"
    assert [d["id"] for d in out if isinstance(d, dict)] == [i for i in range(1, 16) if i % 7]
    assert t.calls == 15


def test_a_result_that_is_not_a_dict_is_refused() -> None:
    (err,) = transform("not_a_dict").apply(products(1))
    assert isinstance(err, DocumentError) and err.error_class == "TransformError"
    assert "returned a list, not a dict" in err.reason


def test_a_transient_error_is_not_the_documents_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    def down(doc: dict[str, Any]) -> dict[str, Any]:
        raise TransientError("embedding service unavailable")

    monkeypatch.setattr(toy_embedding, "versioned", down)
    with pytest.raises(TransientError):
        transform("versioned").apply(products(2))


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("tests.support.no_such_module:embed", "No module named 'tests.support.no_such_module'"),
        (f"{TOY}:no_such_function", "has no attribute 'no_such_function'"),
        (f"{TOY}:NOT_CALLABLE", "is a int, not a function"),
    ],
)
def test_a_function_that_cannot_be_imported_is_a_config_error(function: str, message: str) -> None:
    t = DocumentTransform(TransformConfig(function=function), "products")
    with pytest.raises(ConfigError, match=r"^indexes\[0\]\.transform\.function: ") as err:
        t.check("indexes[0]")
    assert message in str(err.value)
    with pytest.raises(ConfigError, match=r"indexes\[0\]\.transform\.function"):  # and in the worker
        t.apply(products(1))
    fresh = DocumentTransform(TransformConfig(function=function), "products")
    with pytest.raises(ConfigError, match=r"^indexes\[products\]\.transform\.function: "):
        fresh.apply(products(1))  # never checked here: named by its alias


def test_pickled_without_the_function() -> None:
    t = transform("versioned")
    t.check("indexes[0]")
    copy = pickle.loads(pickle.dumps(t))
    assert copy._fn is None and copy.identity == t.identity
    assert copy.apply(products(1))[0] == {**products(1)[0][1], "toy_version": 1}


def test_on_change_calls_the_function_only_for_changed_inputs(store: CoordinationStore, embed_log: Path) -> None:
    docs = products(10)
    first = transform("embed", store.transform_cache, on_change=["name", "description"])
    built = first.apply(docs)
    assert (first.calls, first.hits) == (10, 0)

    again = transform("embed", store.transform_cache, on_change=["name", "description"])
    served = again.apply(products(10))
    assert (again.calls, again.hits) == (0, 10)
    assert [dumps_document(d) for d in served if isinstance(d, dict)] == [
        dumps_document(d) for d in built if isinstance(d, dict)
    ]

    # one input changed, one field outside on_change changed: one call, the rest from the cache
    changed = products(10)
    changed[3][1]["description"] = "a cold light"
    changed[5][1]["price"] = 99.0
    third = transform("embed", store.transform_cache, on_change=["name", "description"])
    out = third.apply(changed)
    assert (third.calls, third.hits) == (1, 9)
    assert toy_embedding.logged_calls(embed_log) == [str(i) for i in range(1, 11)] + ["4"]
    fresh = [toy_embedding.embed(doc) for _, doc in changed]
    assert [dumps_document(d) for d in out if isinstance(d, dict)] == [dumps_document(d) for d in fresh]
    assert out[5]["price"] == 99.0  # type: ignore[index]
    assert out[3]["embedding"] != built[3]["embedding"]  # type: ignore[index]


def test_a_new_version_misses_the_cache(store: CoordinationStore) -> None:
    transform("versioned", store.transform_cache, on_change=["name"]).apply(products(4))
    bumped = transform("versioned", store.transform_cache, on_change=["name"], version="2")
    bumped.apply(products(4))
    assert (bumped.calls, bumped.hits) == (4, 0)
    other_alias = DocumentTransform(
        TransformConfig(function=f"{TOY}:versioned", on_change=["name"]), "other", store.transform_cache
    )
    other_alias.apply(products(4))
    assert (other_alias.calls, other_alias.hits) == (4, 0)


def test_failures_are_not_cached(store: CoordinationStore) -> None:
    transform("raising", store.transform_cache, on_change=["name"]).apply(products(8))
    again = transform("raising", store.transform_cache, on_change=["name"])
    out = again.apply(products(8))
    assert (again.calls, again.hits) == (1, 7)
    assert isinstance(out[6], DocumentError) and out[6].reason == "ValueError: bad row 7"


def test_on_change_without_a_cache_still_transforms(embed_log: Path) -> None:
    t = transform("embed", on_change=["name"])
    t.apply(products(3))
    t.apply(products(3))
    assert (t.calls, t.hits) == (6, 0)


def test_a_transform_that_changes_its_argument_is_diffed_against_the_original(store: CoordinationStore) -> None:
    calls: list[str] = []

    def in_place(doc: dict[str, Any]) -> dict[str, Any]:
        calls.append(doc["name"])
        doc["name"] = doc["name"].upper()
        del doc["price"]
        return doc

    t = DocumentTransform(TransformConfig(function=f"{TOY}:versioned", on_change=["name"]), "p", store.transform_cache)
    t._fn = in_place
    docs = products(2)
    first = t.apply(docs)
    assert docs == products(2), "the built documents are left as they were"
    second = t.apply(products(2))
    assert calls == ["lamp 1", "lamp 2"] and t.hits == 2
    assert second == first == [{"id": i, "name": f"LAMP {i}", "description": "a warm light"} for i in (1, 2)]


def test_diffs_set_and_unset_fields() -> None:
    before = {"a": 1, "b": [1, 2], "c": "x"}
    after = {"a": 1, "b": [1, 3], "d": {"e": None}}
    diff = make_diff(before, after)
    assert diff == b'{"set":{"b":[1,3],"d":{"e":null}},"unset":["c"]}'
    assert apply_diff(before, diff) == after
    assert before == {"a": 1, "b": [1, 2], "c": "x"}
    assert apply_diff(before, b"not json") is None
    assert apply_diff(before, b'{"set": []}') is None


def test_a_corrupt_cache_entry_is_a_miss(store: CoordinationStore) -> None:
    t = transform("versioned", store.transform_cache, on_change=["name"])
    t.apply(products(2))
    ((_, (key, _)),) = [(d, v) for d, v in store.transform_cache.lookup("products", ["1"]).items()]
    store.transform_cache.put("products", [("1", key, b"{oops")])
    again = transform("versioned", store.transform_cache, on_change=["name"])
    out = again.apply(products(2))
    assert (again.calls, again.hits) == (1, 1)
    assert out[0] == {**products(1)[0][1], "toy_version": 1}
    assert store.transform_cache.lookup("products", ["1"])["1"][1] != b"{oops", "the entry is written again"


def test_a_transient_error_mid_page_keeps_what_the_page_computed(
    store: CoordinationStore, embed_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = toy_embedding.embed

    def flaky(doc: dict[str, Any]) -> dict[str, Any]:
        if doc["id"] == 6:
            raise TransientError("embedding service unavailable")
        return real(doc)

    monkeypatch.setattr(toy_embedding, "embed", flaky)
    first = transform("embed", store.transform_cache, on_change=["name"])
    with pytest.raises(TransientError, match="unavailable"):
        first.apply(products(10))
    kept = store.transform_cache.lookup("products", [str(i) for i in range(1, 11)])
    assert sorted(kept, key=int) == ["1", "2", "3", "4", "5"], "what was computed before the error is kept"

    monkeypatch.setattr(toy_embedding, "embed", real)
    retry = transform("embed", store.transform_cache, on_change=["name"])
    out = retry.apply(products(10))
    assert (retry.calls, retry.hits) == (5, 5), "the retry computes only the documents not reached"
    assert toy_embedding.logged_calls(embed_log) == [str(i) for i in range(1, 11)]
    assert [dumps_document(d) for d in out] == [dumps_document(real(doc)) for _, doc in products(10)]


def test_a_failing_put_does_not_hide_the_error_that_stopped_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def __init__(self) -> None:
            self.puts = 0

        def lookup(self, alias: str, doc_ids: Any) -> dict[str, tuple[str, bytes]]:
            return {}

        def put(self, alias: str, entries: Any) -> None:
            self.puts += 1
            raise OSError("store unreachable")

    def flaky(doc: dict[str, Any]) -> dict[str, Any]:
        if doc["id"] == 2:
            raise TransientError("embedding service unavailable")
        return {**doc, "toy_version": 1}

    monkeypatch.setattr(toy_embedding, "versioned", flaky)
    cache = Broken()
    with pytest.raises(TransientError, match="unavailable"):
        transform("versioned", cache, on_change=["name"]).apply(products(3))
    assert cache.puts == 1

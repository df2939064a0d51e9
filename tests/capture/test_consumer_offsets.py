"""Consumer offsets, one conformance suite for where they live: the coordination store (SQLite,
PostgreSQL) and an index of the target (OpenSearch and Elasticsearch on osmem-server, a TEST
DOUBLE). The index keeps checkpoint and processed-event documents; a lost checkpoint is recovered
from its batch's processed event, and processed events past their retention are deleted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkindex.capture.consumer_offsets import carry_over, open_consumer_offsets
from sparkindex.config.model import Pipeline
from sparkindex.coordination.offsets import ConsumerOffsetRows, ConsumerOffsets
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import ConfigError
from sparkindex.targets.registry import open_target
from sparkindex.targets.search_engine.offsets import IndexOffsets, checkpoint_id
from tests.support.osmem import *  # noqa: F403 (the osmem, osmem_cluster and es_shim fixtures)
from tests.support.osmem import OsmemCluster, engine_url

KINDS = ["store-sqlite", "store-postgres", "opensearch", "elasticsearch"]


def _pipeline(tmp_path: Path, target: str, offsets: str, extra: str = "") -> Pipeline:
    data: dict[str, Any] = {
        "source": {"url": "sqlite:///shop.db"},
        "target": {"url": target},
        "indexes": [{"alias": "products", "table": "products"}],
        "sync": {"offsets": offsets, "offsets_index": "my-offsets"},
    }
    return Pipeline.model_validate(data).bind(tmp_path, str(tmp_path / "pipeline.yaml"))


@pytest.fixture(params=KINDS)
def positions(
    request: pytest.FixtureRequest, tmp_path: Path, services: dict[str, str], osmem_cluster: OsmemCluster
) -> Iterator[ConsumerOffsets]:
    kind = request.param
    if kind.startswith("store-"):
        url = f"sqlite:///{tmp_path / 'state.db'}" if kind == "store-sqlite" else services["postgres"]
        store = CoordinationStore(url, f"o{abs(hash(str(tmp_path))) % 10**6}_")
        pipeline = _pipeline(tmp_path, "tantivy://index", "store")
        pipeline.coordination.prefix = store.t.partition.name.removesuffix("si_partition")
        yield open_consumer_offsets(pipeline, store, lambda: open_target("tantivy://index", tmp_path, {}))
        store.close()
        return
    url = engine_url(kind, request, osmem_cluster)
    target = open_target(url, tmp_path, {})
    store = CoordinationStore(f"sqlite:///{tmp_path / 'state.db'}")
    offsets = open_consumer_offsets(_pipeline(tmp_path, url, "target"), store, lambda: target)
    assert isinstance(offsets, IndexOffsets)
    yield offsets
    target.close()
    store.close()


def test_saved_positions_read_back_with_running_counts(positions: ConsumerOffsets) -> None:
    assert positions.offsets("g1") == {}
    positions.save("g1", {"products": (10, {"lsn": "0/A"}, "products_v1"), "tags": (7, {"lsn": "0/7"}, None)})
    positions.save("g1", {"products": (25, {"lsn": "0/19"}, "products_v2")}, counts={"products": (3, 1)}, lag_s=0.5)
    positions.save("g1", {"products": (30, {"lsn": "0/1E"}, "products_v2")}, counts={"products": (2, 0)})
    positions.save("g2", {"products": (5, {"lsn": "0/5"}, "products_v1")})
    got = positions.offsets("g1")
    assert set(got) == {"products", "tags"}
    p = got["products"]
    assert (p.group, p.position, p.offset, p.index, p.applied, p.deleted) == (
        "g1",
        30,
        {"lsn": "0/1E"},
        "products_v2",
        5,
        1,
    )
    assert got["tags"].position == 7 and got["tags"].index is None
    assert p.updated_at == pytest.approx(time.time(), abs=60)
    assert sorted((o.group, o.position) for o in positions.groups_of("products")) == [("g1", 30), ("g2", 5)]
    every = sorted((o.group, o.alias, o.position) for o in positions.every_group())
    assert every == [("g1", "products", 30), ("g1", "tags", 7), ("g2", "products", 5)]


def test_forget_a_group_or_some_of_its_aliases(positions: ConsumerOffsets) -> None:
    positions.save("g1", {"products": (10, {}, None), "tags": (7, {}, None)})
    positions.save("g2", {"products": (5, {}, None)})
    positions.forget("g1", ["tags"])
    assert set(positions.offsets("g1")) == {"products"}
    positions.forget("g1")
    assert positions.offsets("g1") == {}
    assert set(positions.offsets("g2")) == {"products"}


def _other_process(positions: ConsumerOffsets) -> IndexOffsets:
    """The same index, read by a process that wrote nothing (a sync restarted after a crash)."""
    assert isinstance(positions, IndexOffsets)
    return IndexOffsets(
        positions.api, positions.index, positions.namespace, positions.retention_s, positions.cache_size
    )


def test_a_lost_checkpoint_is_recovered_from_its_processed_event(positions: ConsumerOffsets) -> None:
    if not isinstance(positions, IndexOffsets):
        pytest.skip("the store records a batch's positions in one transaction: nothing to recover")
    positions.save("g1", {"products": (10, {"lsn": "0/A"}, "v1")}, counts={"products": (4, 0)})
    positions.save("g1", {"products": (20, {"lsn": "0/14"}, "v1")}, counts={"products": (2, 0)})
    # the crash between the two writes of the second save: its checkpoint never reached the index
    path = f"/{positions.index}/_doc/{checkpoint_id(positions.namespace, 'g1', 'products')}"
    positions.api.call("PUT", path, "planting the older checkpoint", _stale(positions.namespace))
    positions.api.call("POST", f"/{positions.index}/_refresh", "refreshing")
    restarted = _other_process(positions)
    got = restarted.offsets("g1")["products"]
    assert (got.position, got.offset) == (20, {"lsn": "0/14"}), "resume after the acknowledged batch, not before it"


def test_recovery_finds_every_alias_of_the_group_and_only_events_past_their_checkpoints(
    positions: ConsumerOffsets,
) -> None:
    if not isinstance(positions, IndexOffsets):
        pytest.skip("the store records a batch's positions in one transaction: nothing to recover")
    positions.save("g1", {"products": (10, {"lsn": "0/A"}, "v1"), "articles": (30, {"lsn": "0/1E"}, "a1")})
    positions.save("g1", {"products": (20, {"lsn": "0/14"}, "v1"), "reviews": (25, {"lsn": "0/19"}, "r1")})
    positions.save("g2", {"products": (99, {"lsn": "0/63"}, "v9")})  # another group: never mixed in
    path = f"/{positions.index}/_doc/{checkpoint_id(positions.namespace, 'g1', 'products')}"
    positions.api.call("PUT", path, "planting the older checkpoint", _stale(positions.namespace))
    lost = f"/{positions.index}/_doc/{checkpoint_id(positions.namespace, 'g1', 'reviews')}"
    positions.api.call("DELETE", lost, "losing the only checkpoint of an alias")
    positions.api.call("POST", f"/{positions.index}/_refresh", "refreshing")
    got = {a: (o.position, o.offset) for a, o in _other_process(positions).offsets("g1").items()}
    assert got == {
        "products": (20, {"lsn": "0/14"}),  # its checkpoint older than its newest event
        "articles": (30, {"lsn": "0/1E"}),  # its checkpoint current
        "reviews": (25, {"lsn": "0/19"}),  # no checkpoint left: its event alone
    }


def _stale(namespace: str) -> dict[str, Any]:
    return {
        "doc_type": "checkpoint",
        "namespace": namespace,
        "consumer_group": "g1",
        "source_index": "products",
        "position": 10,
        "offset": {"lsn": "0/A"},
        "index_name": "v1",
        "applied": 4,
        "deleted": 0,
        "updated_at": int(time.time() * 1000),
    }


def test_processed_events_past_their_retention_are_deleted_and_checkpoints_stay(positions: ConsumerOffsets) -> None:
    if not isinstance(positions, IndexOffsets):
        pytest.skip("the store keeps one row per group and alias: nothing accumulates")
    for position in (10, 20, 30):
        positions.save("g1", {"products": (position, {}, None)})
    assert _count(positions, "processed_event") == 3
    assert positions.prune(time.time()) == 0  # all younger than the retention (7 days)
    assert positions.prune(time.time() + positions.retention_s + 60) == 3
    assert _count(positions, "processed_event") == 0
    assert _count(positions, "checkpoint") == 1
    assert _other_process(positions).offsets("g1")["products"].position == 30


def test_pipelines_sharing_the_offsets_index_never_see_each_others_groups(positions: ConsumerOffsets) -> None:
    """Two pipelines, one cluster, the same index and group name: each reads, forgets and prunes
    only its own (a foreign offset would hold a PostgreSQL slot back, or be forgotten)."""
    if not isinstance(positions, IndexOffsets):
        pytest.skip("each pipeline has a store of its own")
    other = IndexOffsets(positions.api, positions.index, "other-pipeline", positions.retention_s, 10)
    positions.save("default", {"products": (10, {"lsn": "0/A"}, "p_v1")})
    other.save("default", {"orders": (99, {"gtid": "0-1-99"}, "o_v1"), "products": (5, {}, "x_v1")})
    assert {a: o.position for a, o in positions.offsets("default").items()} == {"products": 10}
    assert {a: o.position for a, o in other.offsets("default").items()} == {"orders": 99, "products": 5}
    assert [o.position for o in positions.groups_of("products")] == [10]
    positions.forget("default")
    assert positions.offsets("default") == {}
    assert set(other.offsets("default")) == {"orders", "products"}
    assert positions.prune(time.time() + positions.retention_s + 60) == 0  # the other's events are not ours
    assert _count(positions, "processed_event") == 2


def _count(positions: IndexOffsets, doc_type: str) -> int:
    body = {"query": {"term": {"doc_type": doc_type}}}
    return int(positions.api.call("POST", f"/{positions.index}/_count", "counting", body)["count"])


def test_tantivy_keeps_no_offsets_index(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path, "tantivy://index", "target")
    store = CoordinationStore(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        with pytest.raises(ConfigError, match=r"sync\.offsets: target: TantivyTarget cannot keep consumer offsets"):
            open_consumer_offsets(pipeline, store, lambda: open_target("tantivy://index", tmp_path, {}))
    finally:
        store.close()


def test_the_offsets_index_may_not_be_an_alias(tmp_path: Path) -> None:
    data = {
        "source": {"url": "sqlite:///shop.db"},
        "indexes": [{"alias": "sparkindex-offsets", "table": "products"}],
        "sync": {"offsets": "target"},
    }
    with pytest.raises(ValueError, match=r"indexes\[0\]\.alias: 'sparkindex-offsets' is also sync\.offsets_index"):
        Pipeline.model_validate(data)


def test_store_offsets_stay_in_the_store(tmp_path: Path) -> None:
    store = CoordinationStore(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        opened: list[str] = []
        pipeline = _pipeline(tmp_path, "tantivy://index", "store")
        got = open_consumer_offsets(pipeline, store, lambda: opened.append("target"))  # type: ignore[arg-type,return-value]
        assert isinstance(got, ConsumerOffsetRows) and opened == [], "no target opened for offsets: store"
    finally:
        store.close()


def test_the_server_shows_offsets_kept_in_the_target(tmp_path: Path, osmem_cluster: OsmemCluster) -> None:
    """/api/sync, the WebSocket and the metrics read consumers through ServerState.sync_consumers:
    with ``sync.offsets: target`` those come from the target's offsets index, not the store."""
    from prometheus_client.registry import CollectorRegistry

    from sparkindex.server.auth import Guard
    from sparkindex.server.metrics import StoreCollector
    from sparkindex.server.state import ServerState

    pipeline = _pipeline(tmp_path, osmem_cluster.opensearch_url, "target")
    state = ServerState.open(pipeline, tmp_path / "pipeline.yaml", Guard("t", "127.0.0.1"))
    try:
        assert state.sync_consumers() == []
        target = open_target(osmem_cluster.opensearch_url, tmp_path, {})
        writer = open_consumer_offsets(pipeline, state.store, lambda: target)
        writer.save("shop-sync", {"products": (123456, {"lsn": "0/1E240"}, "products_v2")}, {"products": (10, 2)}, 3.5)
        [consumer] = state.sync_consumers()
        assert (consumer.group, consumer.alias, consumer.position, consumer.index) == (
            "shop-sync",
            "products",
            "123456",
            "products_v2",
        )
        assert (consumer.applied, consumer.deleted, consumer.lag_s) == (10, 2, 3.5)
        registry = CollectorRegistry()
        registry.register(StoreCollector(state))
        labels = {"group": "shop-sync", "alias": "products"}
        assert registry.get_sample_value("sparkindex_sync_lag_seconds", labels) == 3.5
        target.close()
    finally:
        state.close()


def test_switching_to_target_offsets_carries_the_stores_over(tmp_path: Path, osmem_cluster: OsmemCluster) -> None:
    """An alias without an offset would start at the head of the log and skip what was committed
    since the store's position; so the store's offsets move to the target, once, never over newer."""
    pipeline = _pipeline(tmp_path, osmem_cluster.opensearch_url, "target")
    store = CoordinationStore(pipeline.coordination_url())
    target = open_target(osmem_cluster.opensearch_url, tmp_path, {})
    try:
        store.offsets.save("g1", {"products": (50, {"ts": 50}, "p_v1"), "tags": (9, {"ts": 9}, "t_v1")})
        positions = open_consumer_offsets(pipeline, store, lambda: target)
        positions.save("g1", {"tags": (70, {"ts": 70}, "t_v2")})  # the target is ahead for this one
        assert carry_over(pipeline, store, positions, "g1", ["products", "tags"]) == 1
        got = positions.offsets("g1")
        assert (got["products"].position, got["products"].offset, got["products"].index) == (50, {"ts": 50}, "p_v1")
        assert got["tags"].position == 70, "never over a newer offset"
        assert carry_over(pipeline, store, positions, "g1", ["products", "tags"]) == 0
    finally:
        target.close()
        store.close()

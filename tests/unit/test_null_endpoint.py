"""The null bulk endpoint (bench/null_endpoint.py), driven by the real opensearch-py client.

Why: the null benchmark's figure is only meaningful if the pipeline talks to this server exactly
as it would to OpenSearch, so the server is started as its own process (as the benchmark does)
and spoken to by the official client, not by hand-written requests.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import orjson
import pytest
from bench.null_endpoint import NullEndpoint, null_endpoint
from opensearchpy import ConflictError, NotFoundError, OpenSearch, RequestError, helpers


@pytest.fixture(scope="module")
def endpoint() -> Iterator[NullEndpoint]:
    with null_endpoint() as ep:
        yield ep


@pytest.fixture
def client(endpoint: NullEndpoint) -> Iterator[OpenSearch]:
    c = OpenSearch(hosts=[{"host": endpoint.host, "port": endpoint.port}], timeout=30)
    yield c
    c.close()


def test_reports_itself_as_opensearch_2(client: OpenSearch) -> None:
    version = client.info()["version"]
    assert version["distribution"] == "opensearch"
    assert version["number"].startswith("2.")


def test_create_exists_settings_mapping_delete(client: OpenSearch) -> None:
    body = {
        "settings": {"index": {"refresh_interval": "-1", "number_of_replicas": 0}},
        "mappings": {"_meta": {"fence": 1}, "properties": {"title": {"type": "text"}}},
    }
    assert client.indices.create(index="life_v1", body=body)["acknowledged"]
    assert client.indices.exists(index="life_v1")
    assert not client.indices.exists(index="life_v2")
    with pytest.raises(RequestError) as refused:
        client.indices.create(index="life_v1")
    assert refused.value.error == "resource_already_exists_exception"

    settings = client.indices.get_settings(index="life_v1")["life_v1"]["settings"]["index"]
    assert (settings["refresh_interval"], settings["number_of_replicas"]) == ("-1", "0")
    client.indices.put_settings(index="life_v1", body={"index": {"refresh_interval": "1s"}})
    only = client.indices.get_settings(index="life_v*", name="index.refresh_interval")
    assert only == {"life_v1": {"settings": {"index": {"refresh_interval": "1s"}}}}

    client.indices.put_mapping(index="life_v1", body={"_meta": {"fence": 2}})
    mappings = client.indices.get_mapping(index="life_v1")["life_v1"]["mappings"]
    assert mappings == {"_meta": {"fence": 2}, "properties": {"title": {"type": "text"}}}

    client.indices.delete(index="life_v1")
    assert not client.indices.exists(index="life_v1")
    with pytest.raises(NotFoundError):
        client.indices.delete(index="life_v1")


def test_bulk_answers_each_item_in_order_and_counts(client: OpenSearch) -> None:
    client.indices.create(index="bulk_v1")
    actions = [
        {"index": {"_id": "a", "version": 7, "version_type": "external_gte"}},
        {"title": "first line\nwith an escaped newline", "comments": [{"body": "x"}]},
        {"create": {"_id": 'b"\\é'}},
        {"title": "second"},
        {"delete": {"_id": "a"}},
        {"index": {"_index": "bulk_v1", "_id": "c"}},
        {"title": "third"},
    ]
    answer = client.bulk(index="bulk_v1", body=actions)
    assert answer["errors"] is False
    got = [(op, item["_index"], item["_id"], item["status"]) for entry in answer["items"] for op, item in entry.items()]
    assert got == [
        ("index", "bulk_v1", "a", 201),
        ("create", "bulk_v1", 'b"\\é', 201),
        ("delete", "bulk_v1", "a", 200),
        ("index", "bulk_v1", "c", 201),
    ]
    assert answer["items"][0]["index"]["_version"] == 7
    assert client.count(index="bulk_v1")["count"] == 2  # three index operations, one delete


def test_large_and_compressed_bulks(endpoint: NullEndpoint) -> None:
    """Bodies far larger than the input buffer arrive straight into their own buffer; gzip too."""
    doc = {"body": "z" * 2000, "nested": [{"n": i} for i in range(4)]}
    for compress in (False, True):
        c = OpenSearch(hosts=[{"host": endpoint.host, "port": endpoint.port}], http_compress=compress)
        try:
            c.indices.create(index=f"big_{compress}")
            rows = ({"_index": f"big_{compress}", "_id": str(i), **doc} for i in range(3000))
            ok, errors = helpers.bulk(c, rows, chunk_size=1500, max_chunk_bytes=10 * 1024 * 1024)
            assert (ok, errors) == (3000, [])
            assert c.count(index=f"big_{compress}")["count"] == 3000
        finally:
            c.close()


def test_chunked_request_body(endpoint: NullEndpoint) -> None:
    conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=10)
    try:
        lines = [b'{"index":{"_index":"chunked","_id":"1"}}\n', b'{"x":1}\n']
        conn.request("POST", "/_bulk", body=iter(lines), encode_chunked=True)
        answer = orjson.loads(conn.getresponse().read())
        assert answer["items"] == [
            {
                "index": {
                    "_index": "chunked",
                    "_id": "1",
                    "_version": 1,
                    "_seq_no": answer["items"][0]["index"]["_seq_no"],
                    "result": "created",
                    "_shards": {"total": 1, "successful": 1, "failed": 0},
                    "_primary_term": 1,
                    "status": 201,
                }
            }
        ]
    finally:
        conn.close()


def test_alias_compare_and_swap_refuses_a_stale_remove(client: OpenSearch) -> None:
    for name in ("swap_v1", "swap_v2", "swap_v3"):
        client.indices.create(index=name)
    client.indices.update_aliases(body={"actions": [{"add": {"index": "swap_v1", "alias": "swap"}}]})
    assert client.indices.get_alias(name="swap") == {"swap_v1": {"aliases": {"swap": {}}}}

    move = [
        {"remove": {"index": "swap_v1", "alias": "swap", "must_exist": True}},
        {"add": {"index": "swap_v2", "alias": "swap", "is_write_index": True}},
    ]
    client.indices.update_aliases(body={"actions": move})
    assert client.indices.get_alias(name="swap") == {"swap_v2": {"aliases": {"swap": {"is_write_index": True}}}}

    stale = [  # a job that still believes the alias is on v1
        {"remove": {"index": "swap_v1", "alias": "swap", "must_exist": True}},
        {"add": {"index": "swap_v3", "alias": "swap"}},
    ]
    with pytest.raises(NotFoundError) as refused:
        client.indices.update_aliases(body={"actions": stale})
    assert refused.value.error == "aliases_not_found_exception"
    # all or nothing: the add of the refused request did not happen either
    assert client.indices.get_alias(name="swap") == {"swap_v2": {"aliases": {"swap": {"is_write_index": True}}}}
    assert not client.indices.exists_alias(name="nowhere")
    assert client.indices.get_alias(name="nowhere*") == {}  # a wildcard finds nothing, without a 404
    assert client.indices.get_alias(name="swa*") == {"swap_v2": {"aliases": {"swap": {"is_write_index": True}}}}

    client.bulk(index="swap", body=[{"index": {"_id": "1"}}, {"x": 1}])  # writes follow the alias
    assert client.count(index="swap")["count"] == 1
    assert client.count(index="swap_v2")["count"] == 1


def test_external_versions_of_single_documents(client: OpenSearch) -> None:
    """Fencing tokens are recorded this way: an older version must get its 409."""
    client.index(
        index="fences", id="articles", body={"fence": 5}, params={"version": 5, "version_type": "external_gte"}
    )
    client.index(
        index="fences", id="articles", body={"fence": 5}, params={"version": 5, "version_type": "external_gte"}
    )
    with pytest.raises(ConflictError) as conflict:
        client.index(
            index="fences", id="articles", body={"fence": 4}, params={"version": 4, "version_type": "external"}
        )
    assert conflict.value.error == "version_conflict_engine_exception"
    assert client.get(index="fences", id="articles")["_version"] == 5


def test_health_refresh_search_and_unknown_paths(client: OpenSearch, endpoint: NullEndpoint) -> None:
    client.indices.create(index="misc_v1")
    assert client.cluster.health(index="misc_v1", params={"wait_for_status": "green"})["status"] == "green"
    assert client.indices.refresh(index="misc_v1")["_shards"]["failed"] == 0
    assert client.search(index="misc_v1", body={"query": {"match_all": {}}})["hits"]["hits"] == []
    with pytest.raises(NotFoundError):
        client.transport.perform_request("GET", "/misc_v1/_termvectors/1")
    assert endpoint.stats()["unknown"] == {"GET /misc_v1/_termvectors/1": 1}

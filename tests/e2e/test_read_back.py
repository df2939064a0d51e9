"""``spark.read.format("sparkindex")``: an index back as a DataFrame, on real Spark.

The shop is reindexed from SQLite, read back, and compared with the documents the database
builds (an independent path: the builder, not the index); hostile keys written through the
DataFrame writer come back exactly once across slices. Each runs on Tantivy and on OpenSearch
(the slices on Elasticsearch too); those runs are against osmem-server, an in-memory
OpenSearch-compatible TEST DOUBLE (behind a shim for the elasticsearch client; no real server
can be installed here), so they prove sparkindex's side of the exchange only.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from sparkindex.config import load_pipeline
from sparkindex.documents.builder import make_builder
from sparkindex.documents.planning import resolve_plans
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.keys import document_id
from sparkindex.resources import open_source_url, open_target_url
from sparkindex.sources.base import KeyRange
from tests.e2e.shop import make_shop
from tests.support.osmem import *  # noqa: F403 (the session's osmem-server, a test double)
from tests.support.osmem import OsmemCluster, OsmemProcess, cloned_cluster, elasticsearch_url

pytestmark = pytest.mark.slow

#: The shop's size per backend: osmem-server (a test double) is slow, so its shop is small.
PRODUCTS = {"tantivy": 2500, "opensearch": 300}
BACKENDS = [pytest.param("tantivy", id="tantivy"), pytest.param("opensearch", id="opensearch-on-osmem-test-double")]


@pytest.fixture(scope="module")
def osmem_module(osmem: OsmemProcess) -> Iterator[OsmemCluster]:
    """An empty osmem-server (TEST DOUBLE) cluster of this module's own."""
    with cloned_cluster(osmem) as cluster:
        yield cluster


def target_url(request: pytest.FixtureRequest, backend: str, root: Path) -> str:
    if backend == "tantivy":
        return f"tantivy://{root}"
    if backend == "elasticsearch":  # the elasticsearch client needs the shim in front of osmem
        return elasticsearch_url(request.getfixturevalue("es_shim"))
    cluster: OsmemCluster = request.getfixturevalue("osmem_module")
    return cluster.opensearch_url


@pytest.fixture(scope="module", params=BACKENDS)
def shop(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Shop:
    """The shop reindexed into each backend; returns its target URL and id -> document as the
    database builds it."""
    backend = str(request.param)
    products = PRODUCTS[backend]
    directory = tmp_path_factory.mktemp(f"shop-{backend}")
    url = target_url(request, backend, directory / "index")
    pipeline = make_shop(directory, products=products, partition_size=products // 3 + 1)
    yaml = directory / "pipeline.yaml"
    yaml.write_text(yaml.read_text(encoding="utf-8").replace("url: tantivy://index", f"url: {url}"), "utf-8")
    pipeline = load_pipeline(yaml)
    summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
    assert summary.status == "COMPLETED" and summary.indexed == products
    with open_source_url(pipeline.source_url()) as source:
        plan, _ = resolve_plans(pipeline, source, ["products"])["products"]
        page = make_builder(source, plan).page(KeyRange(None, None), None, products + 1)
    assert page.failures == [] and page.rows == products
    return Shop(backend, url, {d.id: d.fields or {} for d in page.docs})


@dataclass(frozen=True)
class Shop:
    backend: str
    url: str
    expected: dict[str, dict[str, Any]]


def read(spark: Any, url: str, index: str = "products", **options: str) -> Any:
    reader = spark.read.format("sparkindex").option("target", url).option("index", index)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def unordered(data_type: Any) -> str:
    """A Spark type as text, struct members sorted by name (a search engine may keep the mapping's
    properties in another order)."""
    if isinstance(data_type, StructType):
        return (
            "struct<"
            + ",".join(f"{f.name}:{unordered(f.dataType)}" for f in sorted(data_type, key=lambda f: f.name))
            + ">"
        )
    if isinstance(data_type, ArrayType):
        return f"array<{unordered(data_type.elementType)}>"
    return str(data_type.simpleString())


def utc(value: Any) -> Any:
    """What a date from the database is in the index: naive means UTC."""
    return value.replace(tzinfo=dt.UTC) if isinstance(value, dt.datetime) else value


def as_read_back(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        k: ([as_read_back(x) for x in v] if isinstance(v, list) else as_read_back(v) if isinstance(v, dict) else utc(v))
        for k, v in doc.items()
    }


def test_the_shop_round_trips_with_its_mapping_as_schema(spark: Any, shop: Shop) -> None:
    expected = shop.expected
    df = read(spark, shop.url, partitions="4")
    assert df.rdd.getNumPartitions() == 4
    schema = {f.name: unordered(f.dataType) for f in df.schema.fields}
    assert schema == {
        "_id": "string",
        "id": "bigint",
        "name": "string",
        "description": "string",
        "price": "double",
        "stock": "bigint",
        "category_id": "bigint",
        "created_at": "timestamp",
        "category": "struct<description:string,id:bigint,name:string>",
        "reviews": "array<struct<author:struct<country:string,id:bigint,name:string>,author_id:bigint,body:string,"
        "id:bigint,product_id:bigint,rating:bigint>>",
    }  # all_text only receives copy_to values: never in a source, so not a column
    assert not df.schema["_id"].nullable
    rows = df.toArrow().to_pylist()
    assert len(rows) == len(expected)
    got = {r.pop("_id"): r for r in rows}
    assert got.keys() == expected.keys()
    for doc_id, doc in expected.items():
        assert got[doc_id] == as_read_back(doc), doc_id


def test_fields_and_query_options(spark: Any, shop: Shop) -> None:
    expected = shop.expected
    df = read(spark, shop.url, fields="price, name", query="name:lamp AND stock:[0 TO 300]", partitions="3")
    assert df.columns == ["_id", "price", "name"]
    got = {r["_id"]: (r["price"], r["name"]) for r in df.collect()}
    want = {
        i: (d["price"], d["name"]) for i, d in expected.items() if "lamp" in d["name"].split() and d["stock"] <= 300
    }
    assert want and got == want
    # Spark's own filters and aggregations work on top
    assert read(spark, shop.url).where(F.col("category.id") == 3).count() == sum(
        1 for d in expected.values() if d["category"]["id"] == 3
    )


def test_read_options_are_validated_with_clear_errors(spark: Any, shop: Shop) -> None:
    url = shop.url
    cases = [
        ({"fields": "name,colour"}, "no field 'colour' in the index"),
        ({"partitions": "zero"}, "option 'partitions' must be a positive integer"),
        ({"query": "name:(unclosed"}, "cannot (parse|run) query"),
        ({"target.password_env": "SPARKINDEX_TEST_UNSET_VARIABLE"}, "SPARKINDEX_TEST_UNSET_VARIABLE"),
    ]
    for options, message in cases:
        with pytest.raises(PySparkException, match=message):
            read(spark, url, **options).collect()
    with pytest.raises(PySparkException, match=r"does not exist|no such index|not found"):
        read(spark, url, index="nothing").collect()
    with pytest.raises(PySparkException, match="option 'index' is required"):
        spark.read.format("sparkindex").option("target", url).load()


HOSTILE_TEXTS = ["", "a", "A", "a|b", "b\\", "\\N", "|", "ü", "Ü", "日本語", "a b", "Zz", "x\x00y", "é" * 30]
HOSTILE_NUMBERS: list[int | None] = [None, -(2**40), -1, 0, 1, 99, 2**40]


@pytest.mark.parametrize("backend", [*BACKENDS, pytest.param("elasticsearch", id="elasticsearch-on-osmem-test-double")])
def test_slices_cover_hostile_keys_exactly_once(
    spark: Any, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = target_url(request, backend, tmp_path / "idx")
    with open_target_url(url, tmp_path) as target:
        mapping = {"properties": {"a": {"type": "keyword"}, "b": {"type": "long"}, "label": {"type": "text"}}}
        target.swap("things", target.create_version("things", mapping), None, fence=1)
        keys = list(itertools.product(HOSTILE_TEXTS, HOSTILE_NUMBERS))
        rows = [(a, b, f"label {i}") for i, (a, b) in enumerate(keys)]
        df = spark.createDataFrame(rows, "a string, b long, label string").repartition(3)
        df.write.format("sparkindex").option("target", url).option("index", "things").option("id_column", "a,b").mode(
            "append"
        ).save()
        assert target.count("things") == len(keys)

        back = read(spark, url, index="things", partitions="7", page_size="5")
        assert back.rdd.getNumPartitions() == 7
        per_slice = back.groupBy(F.spark_partition_id().alias("slice")).count().collect()
        assert len(per_slice) == 7 and all(r["count"] > 0 for r in per_slice)
        got = back.toArrow()
        assert got.num_rows == len(keys)
        assert sorted(got.column("_id").to_pylist()) == sorted(document_id(k) for k in keys)
        assert sorted(zip(got.column("a").to_pylist(), got.column("b").to_pylist(), strict=True), key=repr) == sorted(
            keys, key=repr
        )
        assert got.schema.field("b").type == pa.int64()

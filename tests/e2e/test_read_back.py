"""``spark.read.format("sparkindex")``: an index back as a DataFrame, on real Spark and Tantivy.

The shop is reindexed from SQLite, read back, and compared with the documents the database
builds (an independent path: the builder, not the index); hostile keys written through the
DataFrame writer come back exactly once across slices.
"""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from sparkindex.documents.builder import make_builder
from sparkindex.jobs.planning import resolve_plans
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.keys import document_id
from sparkindex.sources.base import KeyRange
from sparkindex.sources.registry import open_source
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig
from tests.e2e.shop import make_shop

pytestmark = pytest.mark.slow

PRODUCTS = 2500


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The shop reindexed into Tantivy; returns the index root and id -> document as the
    database builds it."""
    directory = tmp_path_factory.mktemp("shop")
    pipeline = make_shop(directory, products=PRODUCTS, partition_size=800)
    summary = ReindexJob(pipeline, spark_factory=lambda: spark).run()
    assert summary.status == "COMPLETED" and summary.indexed == PRODUCTS
    source = open_source(pipeline.source_url())
    plan, _ = resolve_plans(pipeline, source, ["products"])["products"]
    page = make_builder(source, plan).page(KeyRange(None, None), None, PRODUCTS + 1)
    assert page.failures == [] and page.rows == PRODUCTS
    return directory / "index", {d.id: d.fields or {} for d in page.docs}


def read(spark: Any, root: Path, index: str = "products", **options: str) -> Any:
    reader = spark.read.format("sparkindex").option("target", f"tantivy://{root}").option("index", index)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def utc(value: Any) -> Any:
    """What a date from the database is in the index: naive means UTC."""
    return value.replace(tzinfo=dt.UTC) if isinstance(value, dt.datetime) else value


def as_read_back(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        k: ([as_read_back(x) for x in v] if isinstance(v, list) else as_read_back(v) if isinstance(v, dict) else utc(v))
        for k, v in doc.items()
    }


def test_the_shop_round_trips_with_its_mapping_as_schema(spark: Any, shop: tuple[Path, dict[str, Any]]) -> None:
    root, expected = shop
    df = read(spark, root, partitions="4")
    assert df.rdd.getNumPartitions() == 4
    schema = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert schema == {
        "_id": "string",
        "id": "bigint",
        "name": "string",
        "description": "string",
        "price": "double",
        "stock": "bigint",
        "category_id": "bigint",
        "created_at": "timestamp",
        "category": "struct<id:bigint,name:string,description:string>",
        "reviews": "array<struct<id:bigint,product_id:bigint,author_id:bigint,rating:bigint,body:string,"
        "author:struct<id:bigint,name:string,country:string>>>",
    }  # all_text only receives copy_to values: never in a source, so not a column
    assert not df.schema["_id"].nullable
    rows = df.toArrow().to_pylist()
    assert len(rows) == PRODUCTS
    got = {r.pop("_id"): r for r in rows}
    assert got.keys() == expected.keys()
    for doc_id, doc in expected.items():
        assert got[doc_id] == as_read_back(doc), doc_id


def test_fields_and_query_options(spark: Any, shop: tuple[Path, dict[str, Any]]) -> None:
    root, expected = shop
    df = read(spark, root, fields="price, name", query="name:lamp AND stock:[0 TO 300]", partitions="3")
    assert df.columns == ["_id", "price", "name"]
    got = {r["_id"]: (r["price"], r["name"]) for r in df.collect()}
    want = {
        i: (d["price"], d["name"]) for i, d in expected.items() if "lamp" in d["name"].split() and d["stock"] <= 300
    }
    assert want and got == want
    # Spark's own filters and aggregations work on top
    assert read(spark, root).where(F.col("category.id") == 3).count() == sum(
        1 for d in expected.values() if d["category"]["id"] == 3
    )


def test_read_options_are_validated_with_clear_errors(spark: Any, shop: tuple[Path, dict[str, Any]]) -> None:
    root, _ = shop
    cases = [
        ({"fields": "name,colour"}, "no field 'colour' in the index"),
        ({"partitions": "zero"}, "option 'partitions' must be a positive integer"),
        ({"query": "name:(unclosed"}, "cannot parse query"),
        ({"target.password_env": "SPARKINDEX_TEST_UNSET_VARIABLE"}, "SPARKINDEX_TEST_UNSET_VARIABLE"),
    ]
    for options, message in cases:
        with pytest.raises(PySparkException, match=message.replace("(", r"\(")):
            read(spark, root, **options).collect()
    with pytest.raises(PySparkException, match="does not exist"):
        read(spark, root, index="nothing").collect()
    with pytest.raises(PySparkException, match="option 'index' is required"):
        spark.read.format("sparkindex").option("target", f"tantivy://{root}").load()


HOSTILE_TEXTS = ["", "a", "A", "a|b", "b\\", "\\N", "|", "ü", "Ü", "日本語", "a b", "Zz", "x\x00y", "é" * 30]
HOSTILE_NUMBERS: list[int | None] = [None, -(2**40), -1, 0, 1, 99, 2**40]


def test_slices_cover_hostile_keys_exactly_once(spark: Any, tmp_path: Path) -> None:
    target = TantivyTarget(TantivyTargetConfig(root=tmp_path / "idx"))
    mapping = {"properties": {"a": {"type": "keyword"}, "b": {"type": "long"}, "label": {"type": "text"}}}
    target.swap("things", target.create_version("things", mapping), None, fence=1)
    keys = list(itertools.product(HOSTILE_TEXTS, HOSTILE_NUMBERS))
    rows = [(a, b, f"label {i}") for i, (a, b) in enumerate(keys)]
    df = spark.createDataFrame(rows, "a string, b long, label string").repartition(3)
    df.write.format("sparkindex").option("target", f"tantivy://{tmp_path / 'idx'}").option("index", "things").option(
        "id_column", "a,b"
    ).mode("append").save()
    assert target.count("things") == len(keys)

    back = read(spark, tmp_path / "idx", index="things", partitions="7", page_size="5")
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

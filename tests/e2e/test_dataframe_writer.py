"""``df.write.format("sparkindex")``: any DataFrame into a Tantivy index, upserted by id column.

Runs on the session's real local SparkSession; the index, the alias and the coordination store are
files in ``tmp_path``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException

from sparkindex.resources import open_store_url
from sparkindex.spark.target_options import resolve_env, target_options
from sparkindex.targets.tantivy import TantivyTarget, TantivyTargetConfig

pytestmark = pytest.mark.slow

MAPPING = {"properties": {"name": {"type": "text"}, "age": {"type": "long"}}}
PEOPLE = [(1, "ada", 36), (2, "grace", 85), (3, "alan", 41), (4, "edsger", 72), (5, "barbara", 29)]
BAD_ID = 4242


@pytest.fixture
def target(tmp_path: Path) -> Iterator[TantivyTarget]:
    with TantivyTarget(TantivyTargetConfig(root=tmp_path / "idx")) as target:
        index = target.create_version("people", MAPPING)
        target.swap("people", index, None, fence=1)
        yield target


def writer(df: Any, tmp_path: Path) -> Any:
    url = f"tantivy://{tmp_path / 'idx'}"
    assert url.startswith("tantivy:///"), "an absolute root gives the tantivy:///abs/path form"
    return (
        df.write.format("sparkindex")
        .option("target", url)
        .option("index", "people")
        .option("id_column", "id")
        .mode("append")
    )


def test_dataframe_rows_become_documents(spark: Any, tmp_path: Path, target: TantivyTarget) -> None:
    df = spark.createDataFrame(PEOPLE, "id long, name string, age long").repartition(3)
    writer(df, tmp_path).save()
    assert target.count("people") == len(PEOPLE)
    # the documents went into the version behind the alias, not into a new index named after it
    assert target.count(target.alias_target("people") or "") == len(PEOPLE)
    assert not (tmp_path / "idx" / "people").exists()

    hits = target.search("people", "grace")
    assert [h.id for h in hits] == ["2"]
    assert hits[0].source == {"id": 2, "name": "grace", "age": 85}
    assert dict(target.scan_hashes("people")).keys() == {str(p[0]) for p in PEOPLE}


def test_writing_the_same_rows_again_does_not_duplicate(spark: Any, tmp_path: Path, target: TantivyTarget) -> None:
    df = spark.createDataFrame(PEOPLE, "id long, name string, age long")
    writer(df, tmp_path).save()
    hashes = dict(target.scan_hashes("people"))
    writer(df, tmp_path).save()
    assert target.count("people") == len(PEOPLE)
    assert dict(target.scan_hashes("people")) == hashes

    # a changed row replaces its document
    changed = spark.createDataFrame([(1, "ada lovelace", 37)], "id long, name string, age long")
    writer(changed, tmp_path).save()
    assert target.count("people") == len(PEOPLE)
    hits = target.search("people", "lovelace")
    assert [h.id for h in hits] == ["1"]
    assert hits[0].source == {"id": 1, "name": "ada lovelace", "age": 37}
    assert dict(target.scan_hashes("people"))["1"] != hashes["1"]


def bad_rows(spark: Any) -> Any:
    rows = [(pid, name, str(age)) for pid, name, age in PEOPLE]
    rows.insert(2, (BAD_ID, "nobody", "not a number"))
    return spark.createDataFrame(rows, "id long, name string, age string")


def test_rejected_document_fails_the_write_and_names_its_id(spark: Any, tmp_path: Path, target: TantivyTarget) -> None:
    with pytest.raises(PySparkException) as err:
        writer(bad_rows(spark), tmp_path).save()
    message = str(err.value)
    assert str(BAD_ID) in message
    assert "people" in message
    assert "PermanentError" in message


def test_rejected_document_is_dead_lettered_with_a_coordination_store(
    spark: Any, tmp_path: Path, target: TantivyTarget
) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    writer(bad_rows(spark), tmp_path).option("coordination", url).save()
    with open_store_url(url) as store:
        letters = {d.doc_id: d for d in store.dead_letters.list(alias="people")}
    assert str(BAD_ID) in letters
    bad = letters[str(BAD_ID)]
    assert bad.alias == "people"
    assert bad.attempts == 1
    assert "age" in bad.error_message
    # every row is either indexed or dead-lettered, none both, none lost
    indexed = set(dict(target.scan_hashes("people")))
    assert indexed.isdisjoint(letters)
    assert indexed | set(letters) == {str(p[0]) for p in PEOPLE} | {str(BAD_ID)}


def test_composite_id_columns(spark: Any, tmp_path: Path, target: TantivyTarget) -> None:
    df = spark.createDataFrame([(1, "ada", 36), (1, "bob", 40)], "id long, name string, age long")
    writer(df, tmp_path).option("id_column", "id, name").save()
    assert target.count("people") == 2
    assert set(dict(target.scan_hashes("people"))) == {"1|ada", "1|bob"}


def test_null_values_are_indexed_as_missing_fields(spark: Any, tmp_path: Path, target: TantivyTarget) -> None:
    """A NULL column is an absent field (as in Elasticsearch), not a reason to reject the row."""
    df = spark.createDataFrame([(1, "ada", 36), (2, "grace", None), (3, None, 41)], "id long, name string, age long")
    writer(df, tmp_path).save()
    assert target.count("people") == 3
    sources = {h.id: h.source for h in target.search("people", "", limit=10)}
    assert sources["2"] == {"id": 2, "name": "grace", "age": None}
    assert sources["3"] == {"id": 3, "name": None, "age": 41}


def test_target_options_and_secrets_by_environment_name(
    spark: Any, tmp_path: Path, target: TantivyTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``target.<key>`` reaches the target; ``target.<key>_env`` names a variable read on the
    executor, so the value itself never becomes a Spark option."""
    df = spark.createDataFrame(PEOPLE[:2], "id long, name string, age long")
    with pytest.raises(PySparkException, match=r"target\.lock_timeout_s_env.*SPARKINDEX_NO_SUCH_VAR"):
        writer(df, tmp_path).option("target.lock_timeout_s_env", "SPARKINDEX_NO_SUCH_VAR").save()
    with pytest.raises(PySparkException, match=r"target\.options\.writer_heap_mb"):
        writer(df, tmp_path).option("target.writer_heap_mb", "1").save()
    writer(df, tmp_path).option("target.writer_heap_mb", "64").save()
    assert target.count("people") == 2
    # the worker processes' environment is fixed when they start; resolving in-process:
    monkeypatch.setenv("SPARKINDEX_TEST_PASSWORD", "s3cret")
    options = target_options({"target": "x", "target.password_env": "SPARKINDEX_TEST_PASSWORD", "target.tls": "1"})
    assert resolve_env(options, "test") == {"password": "s3cret", "tls": "1"}

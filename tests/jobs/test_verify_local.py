"""Verify's range logic in one process (no Spark): real SQLite shop, real builder, real Tantivy.

This module holds verify to its comparison by id (the target says it stores no range checks);
tests/jobs/test_verify_checksums.py runs the checksum path. What it must see: each kind of drift
alone and all together, with exact counts and samples; extra documents counted from the counts
and then found in the index's own key ranges (and that scan skipped when nothing is extra); a
target that cannot split its keys; rows that cannot be built; and a repair that leaves the
index clean.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkindex.config.model import Pipeline
from sparkindex.documents.planning import resolve_plans
from sparkindex.resources import open_source_url, open_store
from sparkindex.targets.reader import TargetReader
from sparkindex.targets.tantivy import TantivyTarget
from sparkindex.targets.target import Target
from sparkindex.verify.local import LocalResources, local_runner
from sparkindex.verify.repair import repair
from sparkindex.verify.verifier import Verifier, VerifyReport
from tests.e2e.shop import execute, make_shop
from tests.jobs.planting import KINDS, built_documents, index_without_spark, plant, plant_each_kind, tantivy

PRODUCTS = 600


class WithoutChecks(TantivyTarget):
    """Tantivy as an index built before indexes stored range checks looks to verify: compared id
    by id (this module's path; tests/jobs/test_verify_checksums.py is the other's)."""

    def stores_checks(self, name: str) -> bool:
        return False


@contextlib.contextmanager
def verifier(pipeline: Pipeline, target: Target | None = None, checks: bool = False) -> Iterator[Verifier]:
    """A verifier over the pipeline's source, store and (unless given) target, open for the block;
    the target compared by checksums only with *checks*."""
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(open_source_url(pipeline.source_url()))
        if target is None:
            base = stack.enter_context(tantivy(pipeline))
            target = base if checks else stack.enter_context(WithoutChecks(base.config))
        plans = {a: p for a, (p, _) in resolve_plans(pipeline, source, ["products"]).items()}
        store = stack.enter_context(open_store(pipeline))
        runner = local_runner(LocalResources(source, target, plans, store))
        yield Verifier(source, target, plans, runner, pipeline.job)


def verify(pipeline: Pipeline, target: Target | None = None) -> VerifyReport:
    with verifier(pipeline, target) as v:
        [report] = v.run()
    return report


def drift(report: VerifyReport) -> dict[str, int]:
    return {k: getattr(report, k) for k in (*KINDS, "unbuildable")}


def sides(report: VerifyReport) -> dict[str, int]:
    """The ranges read on each side."""
    return {k: report.ranges[k] for k in ("source", "index")}


def no_drift(**kinds: int) -> dict[str, int]:
    return {**dict.fromkeys((*KINDS, "unbuildable"), 0), **kinds}


@pytest.fixture
def shop(tmp_path: Path) -> tuple[Pipeline, str]:
    pipeline = make_shop(tmp_path, products=PRODUCTS, partition_size=100)
    return pipeline, index_without_spark(pipeline, "products")


def test_a_clean_index_is_read_once_from_each_side(shop: tuple[Pipeline, str]) -> None:
    pipeline, index = shop
    report = verify(pipeline)
    assert drift(report) == no_drift()
    assert (report.checked, report.index_docs, report.index, report.extra_by_count) == (PRODUCTS, PRODUCTS, index, 0)
    assert sides(report) == {"source": 6, "index": 0}, "nothing is extra: the index is never scanned"
    assert report.clean and report.notes == []


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_drift_alone_is_seen(shop: tuple[Pipeline, str], kind: str) -> None:
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    planted = {"missing": "5", "extra": ("8", (10**9,)), "stale": "7", "duplicate": "9"}
    key = "duplicate" if kind == "duplicates" else kind
    plant(pipeline, index, docs, **{key: planted[key]})  # type: ignore[arg-type]
    report = verify(pipeline)
    assert drift(report) == no_drift(**{kind: 1}), report.samples
    sample = {"missing": "5", "extra": "1000000000", "stale": "7", "duplicates": "9"}[kind]
    assert report.samples[kind] == [sample]
    assert not report.clean
    assert report.ranges["index"] == (6 if kind == "extra" else 0), report.ranges


def test_every_kind_at_once_with_exact_counts(shop: tuple[Pipeline, str]) -> None:
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    planted = plant_each_kind(pipeline, index, docs, ("5", "8", "7", "9"), (-42,))
    report = verify(pipeline)
    assert drift(report) == no_drift(missing=1, extra=1, stale=1, duplicates=1)
    assert {k: v for k, v in report.samples.items() if v} == planted.samples()
    # 600 - 1 deleted + 1 extra + 1 second copy
    assert (report.index_docs, report.checked, report.extra_by_count) == (PRODUCTS + 1, PRODUCTS, 1)
    assert report.notes == [], "the scan and the counts agree"


def test_repair_fixes_every_kind_then_verifies_clean(shop: tuple[Pipeline, str]) -> None:
    pipeline, index = shop
    docs = built_documents(pipeline, "products")
    plant_each_kind(pipeline, index, docs, ("15", "18", "17", "19"), (10**9 + 7,))
    with verifier(pipeline) as v:
        result = repair(v, "test-run")
    [before], [after] = result.before, result.after
    assert drift(before) == no_drift(missing=1, extra=1, stale=1, duplicates=1)
    # indexed: the missing, the stale and the duplicate once more; deleted: the duplicate's copies, the extra
    assert before.repaired == {"indexed": 3, "deleted": 2, "failed": 0}
    assert drift(after) == no_drift() and after.index_docs == PRODUCTS and after.index == index
    with tantivy(pipeline) as target:
        hashes = dict(target.scan_hashes(index, ids=["15", "17", "19"]))
    assert hashes == {i: docs[i].hash for i in ("15", "17", "19")}, "the source's documents are back"


def test_extra_documents_without_a_sort_key_are_found_by_a_whole_scan(shop: tuple[Pipeline, str]) -> None:
    pipeline, index = shop
    odd = 'no-such-row|"é'
    plant(pipeline, index, built_documents(pipeline, "products"), extra=("3", (10**9,)), keyless_extra=("4", odd))
    report = verify(pipeline)
    assert drift(report) == no_drift(extra=2) and report.extra_by_count == 2
    assert report.samples["extra"] == sorted(["1000000000", odd])
    assert sides(report) == {"source": 6, "index": 7}, "six key ranges, then the whole index once"
    assert len(report.notes) == 1 and "scanned whole" in report.notes[0], report.notes
    with verifier(pipeline) as v:
        result = repair(v, "keyless")
    assert result.before[0].repaired == {"indexed": 0, "deleted": 2, "failed": 0}
    assert drift(result.after[0]) == no_drift() and result.after[0].index_docs == PRODUCTS


class NoKeySplits(WithoutChecks):
    """Tantivy as a backend without key splits would be: the interface's own default."""

    def key_splits(self, name: str, parts: int) -> list[str]:
        return TargetReader.key_splits(self, name, parts)


def test_a_target_that_cannot_split_keys_is_scanned_as_one_range(shop: tuple[Pipeline, str]) -> None:
    pipeline, index = shop
    plant(pipeline, index, built_documents(pipeline, "products"), extra=("3", (10**9,)))
    with tantivy(pipeline) as base, NoKeySplits(base.config) as no_splits:
        report = verify(pipeline, no_splits)
    assert drift(report) == no_drift(extra=1)
    assert sides(report) == {"source": 6, "index": 1}
    assert len(report.notes) == 1 and "scanned as one range" in report.notes[0], report.notes


def test_an_unbuildable_row_whose_old_copy_is_indexed_is_stale_not_missing(shop: tuple[Pipeline, str]) -> None:
    pipeline, _ = shop
    execute(pipeline.base_dir / "shop.db", "UPDATE products SET price = 9e999 WHERE id = 42")  # +inf: no JSON
    report = verify(pipeline)
    assert drift(report) == no_drift(stale=1, unbuildable=1)
    assert report.samples["stale"] == report.samples["unbuildable"] == ["42"]
    assert report.index_docs == report.checked == PRODUCTS

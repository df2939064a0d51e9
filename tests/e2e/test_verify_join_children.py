"""Join children (``type: join``) in verify, repair and re-drive, on OpenSearch.

OpenSearch here is osmem-server, an in-memory OpenSearch-compatible TEST DOUBLE (the only target
that holds join children; Tantivy refuses them): what this proves is sparkindex's side. The data
are the join suite's hostile families (composite keys holding ``|``, ``\\`` and ``:``, a parent
whose id looks like a child's, an orphan pet with a NULL owner). Runs in one process (the range
tasks are the same ones Spark runs; the Spark path is in test_verify_spark.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.documents.planning import resolve_plans
from sparkindex.jobs.redrive import redrive
from sparkindex.keys import sort_key
from sparkindex.resources import open_source_url, open_store, open_target
from sparkindex.targets.base import BulkItem
from sparkindex.verify.local import LocalResources, local_runner
from sparkindex.verify.repair import repair
from sparkindex.verify.verifier import Verifier, VerifyReport
from tests.fresh_databases import fresh_database
from tests.jobs.planting import built_documents, variant, write
from tests.support.osmem import *  # noqa: F403 (the osmem and osmem_cluster fixtures)
from tests.support.osmem import OsmemCluster
from tests.unit.test_join_documents import _load

COUNTED = ("missing", "extra", "stale", "duplicates", "unbuildable")


@pytest.fixture
def families(tmp_path: Path, osmem_cluster: OsmemCluster) -> Pipeline:
    with fresh_database("sqlite", tmp_path, dict, _load) as url:
        (tmp_path / "pipeline.yaml").write_text(
            f"source:\n  url: {url}\ntarget:\n  url: {osmem_cluster.opensearch_url}\n"
            "indexes:\n  - alias: owners\n    table: owners\n"
            "    relations:\n      - {name: pets, type: join, table: pets}\n",
            encoding="utf-8",
        )
        yield load_pipeline(tmp_path / "pipeline.yaml")


@contextlib.contextmanager
def verifier(pipeline: Pipeline) -> Iterator[Verifier]:
    """A verifier over the pipeline's source, target and store, open for the block."""
    with (
        open_source_url(pipeline.source_url()) as source,
        open_target(pipeline) as target,
        open_store(pipeline) as store,
    ):
        plans = {a: p for a, (p, _) in resolve_plans(pipeline, source, ["owners"]).items()}
        runner = local_runner(LocalResources(source, target, plans, store))
        yield Verifier(source, target, plans, runner, pipeline.job)


def verify(pipeline: Pipeline) -> VerifyReport:
    with verifier(pipeline) as v:
        [report] = v.run()
    return report


def counts(report: VerifyReport) -> dict[str, int]:
    return {k: getattr(report, k) for k in COUNTED}


def index_families(pipeline: Pipeline) -> str:
    with open_source_url(pipeline.source_url()) as source, open_target(pipeline) as target:
        _, mapping = resolve_plans(pipeline, source, ["owners"])["owners"]
        index = target.create_version("owners", mapping)
        write(target, index, [d.bulk_item() for d in built_documents(pipeline, "owners").values()])
        target.finish_version(index)
        target.swap("owners", index, None)
        return index


def test_children_drift_is_found_repaired_and_redriven(families: Pipeline) -> None:
    pipeline = families
    index = index_families(pipeline)
    docs = built_documents(pipeline, "owners")
    children = sorted(d for d in docs if d.startswith("pets:"))
    assert len(children) == 7 and len(docs) == 12, sorted(docs)  # one parent cannot be built (IdCollision)
    report = verify(pipeline)
    assert counts(report) == {**dict.fromkeys(COUNTED, 0), "missing": 1, "unbuildable": 1}, report.samples
    assert report.samples["unbuildable"] == ["pets:EU|c"]

    ghost = docs["pets:EU|t:3"]
    stale = variant(docs["pets:EU|t\\|1"], "pets:EU|t\\|1", pets={"name": "renamed"})
    ghost_key = sort_key(("EU", "a", "pets", "EU", "ghost"))
    with open_target(pipeline) as target:
        write(
            target,
            index,
            [
                BulkItem("pets:EU|t:3", op="delete", routing=ghost.routing),  # a missing child
                replace(stale, routing=docs["pets:EU|t\\|1"].routing),  # a stale one
                # extra: a pet no row has, and the orphan pet (its row has no owner, so no document)
                replace(variant(ghost, "pets:EU|ghost"), routing="EU|a", sort_key=ghost_key),
                replace(variant(ghost, "pets:EU|orphan"), routing="EU|a"),
            ],
        )
    report = verify(pipeline)
    assert counts(report) == {"missing": 2, "extra": 2, "stale": 1, "duplicates": 0, "unbuildable": 1}
    assert report.samples["missing"] == ["pets:EU|c", "pets:EU|t:3"]
    assert report.samples["extra"] == ["pets:EU|ghost", "pets:EU|orphan"]
    assert report.samples["stale"] == ["pets:EU|t\\|1"]

    with verifier(pipeline) as v:
        result = repair(v, "join")
    [after] = result.after
    assert counts(after) == {**dict.fromkeys(COUNTED, 0), "missing": 1, "unbuildable": 1}, after.samples
    with open_target(pipeline) as target:
        assert dict(target.scan_hashes(index, ids=["pets:EU|t:3"])) == {"pets:EU|t:3": ghost.hash}

        # re-drive: a child the target once rejected, and the orphan pet (no parent: nothing to index)
        write(target, index, [BulkItem("pets:eu|t\\|1", op="delete", routing="eu|a")])
    with open_store(pipeline) as store:
        store.dead_letters.add("job-1", "owners", None, [("pets:eu|t\\|1", "MapperParsingException", "rejected")])
        store.dead_letters.add("job-1", "owners", None, [("pets:EU|orphan", "MapperParsingException", "rejected")])
        done = redrive(pipeline)
        assert (done.attempted, done.succeeded, done.gone, done.failed) == (2, 1, 1, 0)
        assert {r.letter.doc_id: r.resolution for r in store.dead_letters.resolved()} == {
            "pets:eu|t\\|1": "redriven",
            "pets:EU|orphan": "gone",
        }
    final = verify(pipeline)
    assert counts(final) == counts(after)

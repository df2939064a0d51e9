"""A coordination store in a known state, written through the store's own API (no Spark):
one finished job, and one running job whose partitions are in every interesting state. The store
stays open for the test to change it further; whoever called :func:`populate` closes it (the
``populated`` fixture does)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkindex.config import load_pipeline
from sparkindex.coordination.records import PartitionSpec
from sparkindex.coordination.states import JobStatus, PartitionStatus
from sparkindex.coordination.store import CoordinationStore
from sparkindex.resources import open_store
from tests.e2e.shop import make_shop

P = PartitionStatus
OWNER = "worker-host-7/pid-4242"
ERROR = "TransientError: target said 'no' <b>twice</b>"  # markup in user text must stay text


@dataclass
class Populated:
    config: Path
    store: CoordinationStore
    done_job: str
    running_job: str
    partitions: dict[int, str]  # partition_index -> id of the running job's partitions

    def close(self) -> None:
        """Close the store the test changed the state through."""
        self.store.close()


def _specs(n: int, rows: int) -> list[PartitionSpec]:
    return [PartitionSpec("products", i, (i * rows + 1,), ((i + 1) * rows + 1,), rows, rows * 3, 0) for i in range(n)]


def populate(directory: Path, store_url: str | None = None, prefix: str = "") -> Populated:
    """The shop's pipeline over a store in a known state; *store_url*: a server database instead
    of the pipeline's SQLite file (tables named with *prefix*)."""
    pipeline = make_shop(directory, products=40, partition_size=10)
    if store_url is not None:
        config = directory / "pipeline.yaml"
        text = config.read_text().replace(
            "  url: sqlite:///.sparkindex/state.db\n", f"  url: {store_url}\n  prefix: '{prefix}'\n"
        )
        assert store_url in text
        config.write_text(text)
        pipeline = load_pipeline(config)
    store = open_store(pipeline)
    try:
        return Populated(directory / "pipeline.yaml", store, *_fill(store))
    except BaseException:
        store.close()
        raise


def _fill(store: CoordinationStore) -> tuple[str, str, dict[int, str]]:
    """One finished job, and one running job with a partition in each state; their ids."""
    done = store.job_rows.create_job(["products"], {"aliases": ["products"]}, "tester")
    store.job_rows.update_job(done.id, targets={"products": "products_v1"})
    store.partition_rows.add_partitions(done.id, _specs(2, 10))
    store.job_rows.transition_job(done.id, JobStatus.READY)
    store.job_rows.transition_job(done.id, JobStatus.RUNNING)
    for part in store.partition_rows.partitions(done.id):
        claimed = store.partition_rows.claim(part.id, OWNER, "run-1", 60)
        assert claimed is not None
        store.partition_rows.complete(part.id, claimed.claim_token, (part.partition_index * 10 + 10,), success=10)
    store.job_rows.transition_job(done.id, JobStatus.COMPLETED)

    running = store.job_rows.create_job(["products"], {"aliases": ["products"]}, "tester")
    store.job_rows.update_job(running.id, targets={"products": "products_v2"})
    store.partition_rows.add_partitions(running.id, _specs(4, 10))
    store.job_rows.transition_job(running.id, JobStatus.READY)
    store.job_rows.transition_job(running.id, JobStatus.RUNNING)
    ids = {p.partition_index: p.id for p in store.partition_rows.partitions(running.id)}
    # 0: held by a worker, half done (cursor after key 5)
    c0 = store.partition_rows.claim(ids[0], OWNER, "run-2", 60)
    assert c0 is not None
    store.partition_rows.save_progress(ids[0], c0.claim_token, (5,), success=4, failed=1)
    # 1: completed
    c1 = store.partition_rows.claim(ids[1], OWNER, "run-2", 60)
    assert c1 is not None
    store.partition_rows.complete(ids[1], c1.claim_token, (20,), success=10)
    # 2: failed once, back to PENDING with its error
    c2 = store.partition_rows.claim(ids[2], OWNER, "run-2", 60)
    assert c2 is not None
    assert store.partition_rows.fail(ids[2], c2.claim_token, ERROR, max_retries=3) == P.PENDING
    # 3: untouched, PENDING
    store.dead_letters.add(
        running.id,
        "products",
        ids[0],
        [
            ("3", "MapperParsingError", "field 'price': not a number"),
            ("4", "MapperParsingError", "field 'price': not a number"),
            ("7", "DocumentError", "NaN in column rating"),
        ],
    )
    return done.id, running.id, ids

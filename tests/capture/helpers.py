"""The sample shop on a real server, indexed, with a sync ready to run: shared by the change tests.

Each shop gets its own database and its own replication-slot prefix, so tests never read each
other's changes; slots are dropped before the database (a slot pins the WAL of the whole server).
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
import sqlalchemy as sa

from sparkindex.capture.sync.run import SyncRun, SyncSummary
from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from sparkindex.documents.planning import resolve_plans
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target
from sparkindex.verify.local import verify_alias
from sparkindex.verify.verifier import VerifyReport
from tests.cli_process import LoggedProcess
from tests.e2e.shop import copy_shop, fresh_database

#: Names, texts and keys a careless pipeline would break on (quotes, escapes, separators, emoji).
HOSTILE = ['O\'Brien "quoted"', "back\\slash|pipe", "日本語 テキスト", "emoji 🎉🚀", "tab\there", "%_like_%", ""]


@dataclass
class Shop:
    directory: Path
    url: str  # the source database
    pipeline: Pipeline
    slot: str

    def engine(self) -> sa.Engine:
        return sa.create_engine(normalize_url(self.url), isolation_level="AUTOCOMMIT")

    def sql(self, *statements: str, params: dict[str, Any] | None = None) -> None:
        engine = self.engine()
        try:
            with engine.begin() as conn:
                for statement in statements:
                    conn.execute(sa.text(statement), params or {})
        finally:
            engine.dispose()

    def scalar(self, statement: str) -> Any:
        engine = self.engine()
        try:
            with engine.connect() as conn:
                return conn.execute(sa.text(statement)).scalar()
        finally:
            engine.dispose()

    def reindex(self, spark: Any) -> None:
        summary = ReindexJob(self.pipeline, None, new=True, spark_factory=lambda: spark).run()
        assert summary.status == "COMPLETED", summary

    def sync(self, spark: Any, **kwargs: Any) -> SyncSummary:
        return SyncRun(self.pipeline, None, until_caught_up=True, spark_factory=lambda: spark, **kwargs).run()

    def verify(self) -> VerifyReport:
        source = open_source(self.pipeline.source_url())
        target = open_target(self.pipeline.target.url, self.pipeline.base_dir, self.pipeline.target.options)
        try:
            [(plan, _)] = resolve_plans(self.pipeline, source, ["products"]).values()
            return verify_alias(source, target, plan)
        finally:
            source.close()

    def document(self, doc_id: str) -> dict[str, Any] | None:
        """The stored document, read back in keyset pages (every backend can; not every one
        parses an ``_id`` query the same way)."""
        target = open_target(self.pipeline.target.url, self.pipeline.base_dir, self.pipeline.target.options)
        try:
            after = None
            while True:
                page = target.read_documents("products", after=after, size=500)
                found = [d.source for d in page if d.id == doc_id]
                if found or len(page) < 500:
                    return found[0] if found else None
                after = page[-1].sort_key
        finally:
            target.close()


def slot_of(shop: Shop, consumer: str) -> str:
    """The replication slot a consumer of the shop's pipeline reads (named per database and pipeline)."""
    from sparkindex.sources.postgres.slots import slot_name

    database = str(sa.make_url(shop.url).database)
    return slot_name(shop.pipeline.sync.slot, database, shop.pipeline.slot_namespace(), consumer)


def write_pipeline(directory: Path, url: str, slot: str, extra: str = "", target: str | None = None) -> Pipeline:
    text = PIPELINE_YAML.format(partition_size=100).replace("master: local[*,4]", "master: local[2,4]")
    text = text.replace("url: sqlite:///shop.db", f"url: {url}")
    if target is not None:
        text = text.replace("url: tantivy://index", f"url: {target}")
    text += f"sync:\n  slot: {slot}\n  trigger_s: 0.2\n" + extra
    (directory / "pipeline.yaml").write_text(text, encoding="utf-8")
    return load_pipeline(directory / "pipeline.yaml")


def make_pg_shop(
    directory: Path, server_url: str, products: int = 200, extra: str = "", target: str | None = None
) -> Shop:
    directory.mkdir(parents=True, exist_ok=True)
    generate_shop(directory / "shop.db", products)
    name = f"chg_{uuid.uuid4().hex[:10]}"
    url = fresh_database(server_url, name)
    copy_shop(directory / "shop.db", normalize_url(url))
    slot = f"t{uuid.uuid4().hex[:8]}"
    shop = Shop(directory, url, write_pipeline(directory, url, slot, extra, target), slot)
    # a review's delete must reveal its product_id to find the product it belonged to
    shop.sql("ALTER TABLE reviews REPLICA IDENTITY FULL")
    return shop


def make_shop(kind: str, directory: Path, services: dict[str, str], products: int = 200, extra: str = "") -> Shop:
    """The shop on PostgreSQL (slot, REPLICA IDENTITY FULL on reviews) or MariaDB (binlog);
    *extra*: more of the pipeline's ``sync:`` section."""
    if kind == "postgres":
        return make_pg_shop(directory, services["postgres"], products, extra)
    directory.mkdir(parents=True, exist_ok=True)
    generate_shop(directory / "shop.db", products)
    url = fresh_database(services["mysql"], f"chg_{uuid.uuid4().hex[:10]}")
    copy_shop(directory / "shop.db", normalize_url(url))
    slot = f"t{uuid.uuid4().hex[:8]}"
    return Shop(directory, url, write_pipeline(directory, url, slot, extra), slot)


def drop_shop(kind: str, shop: Shop, services: dict[str, str]) -> None:
    if kind == "postgres":
        drop_pg_shop(shop, services["postgres"])
        return
    engine = sa.create_engine(normalize_url(services["mysql"]), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {sa.make_url(shop.url).database}")
    engine.dispose()


def commit_position(kind: str, conn: sa.Connection) -> int:
    """The log position of this session's last commit, or one at or past it (PostgreSQL)."""
    if kind == "postgres":
        from sparkindex.sources.postgres.slots import lsn_int

        return lsn_int(str(conn.exec_driver_sql("SELECT pg_current_wal_insert_lsn()::text").scalar()))
    from sparkindex.sources.mysql.gtids import gtid_seq

    return gtid_seq(str(conn.exec_driver_sql("SELECT @@last_gtid").scalar()))


KINDS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]


def drop_pg_shop(shop: Shop, server_url: str) -> None:
    engine = sa.create_engine(normalize_url(server_url), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        # a reader that is still winding down (a stopped query's planner) may hold a slot
        conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name LIKE :p AND active_pid IS NOT NULL"
            ),
            {"p": f"{shop.slot}%"},
        )
        wait_until(
            lambda: (
                not conn.execute(
                    sa.text("SELECT 1 FROM pg_replication_slots WHERE slot_name LIKE :p AND active"),
                    {"p": f"{shop.slot}%"},
                ).first()
            ),
            60,
            "the slots to be released",
        )
        conn.execute(
            sa.text("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE :p"),
            {"p": f"{shop.slot}%"},
        )
        name = sa.make_url(shop.url).database
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    engine.dispose()


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll a condition with a deadline (the condition is the synchronisation, not the clock)."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class RestartableServer(Protocol):
    def stop(self) -> None: ...
    def start(self) -> None: ...


def assert_sync_survives_a_restart(shop: Shop, server: RestartableServer, cli: Path) -> None:
    """A running ``sparkindex sync`` process, its database server stopped and started under it:
    changes before and after reach the index, SIGTERM then ends it cleanly, verify is clean."""
    proc = LoggedProcess(
        [str(cli), "sync", "-c", str(shop.directory / "pipeline.yaml")], shop.directory / "logs", start_new_session=True
    )
    try:
        shop.sql("UPDATE products SET name = :n WHERE id = 1", params={"n": HOSTILE[0]})
        wait_until(
            lambda: proc.assert_running("sync") and (shop.document("1") or {}).get("name") == HOSTILE[0],
            300,
            "the first update",
        )
        server.stop()
        server.start()
        shop.sql("UPDATE products SET name = :n WHERE id = 2", params={"n": HOSTILE[1]})
        shop.sql("DELETE FROM reviews WHERE product_id = 3")
        shop.sql("DELETE FROM products WHERE id = 3")
        wait_until(
            lambda: (
                proc.assert_running("sync")
                and ((shop.document("2") or {}).get("name") == HOSTILE[1] and shop.document("3") is None)
            ),
            300,
            "the changes after the restart",
        )
        assert proc.poll() is None, "sync must survive the restart"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert shop.verify().clean

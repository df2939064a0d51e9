"""The coordination store: SQLite refused behind a Spark cluster (and a server store as the fix),
its schema level, a Spark master that answers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.config import load_pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.coordination.tables import SCHEMA_VERSION, make_tables
from sparkindex.preflight import Options, run_checks
from tests.e2e.shop import make_shop
from tests.preflight.helpers import checks_of, closed_port, free_port, statuses


def _shop(directory: Path, master: str, coordination: str | None = None) -> Path:
    make_shop(directory, products=20, partition_size=10)
    config = directory / "pipeline.yaml"
    text = config.read_text(encoding="utf-8").replace("master: local[2,4]", f"master: {master}")
    if coordination is not None:
        text = text.replace("  url: sqlite:///.sparkindex/state.db\n", coordination)
    config.write_text(text, encoding="utf-8")
    return config


@pytest.fixture
def pg_prefix(services: dict[str, str]) -> Iterator[str]:
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    yield prefix
    engine = sa.create_engine(services["postgres"].replace("postgresql://", "postgresql+psycopg://"))
    make_tables(prefix).metadata.drop_all(engine)
    engine.dispose()


@pytest.mark.postgres
def test_sqlite_store_on_a_cluster_master_then_a_server_store(
    tmp_path: Path, services: dict[str, str], pg_prefix: str
) -> None:
    master = f"spark://127.0.0.1:{closed_port()}"
    checks = checks_of(_shop(tmp_path / "a", master))
    cluster = checks["store.cluster"]
    assert cluster.status == "FAIL" and "SQLite cannot coordinate a Spark cluster" in cluster.detail
    assert cluster.fix is not None and "postgresql://" in cluster.fix

    coordination = f"  url: {services['postgres']}\n  prefix: {pg_prefix}\n"  # the fix: a server store
    checks = checks_of(_shop(tmp_path / "b", master, coordination))
    assert "store.cluster" not in checks
    assert statuses(checks, "store.") == {"store.reachable": "OK", "store.schema": "OK", "store.writable": "OK"}
    assert "first run creates schema" in checks["store.schema"].detail
    engine = sa.create_engine(services["postgres"].replace("postgresql://", "postgresql+psycopg://"))
    try:
        left = [t for t in sa.inspect(engine).get_table_names() if t.startswith(pg_prefix)]
    finally:
        engine.dispose()
    assert left == [], "the write probe leaves no table behind"


def test_schema_levels(tmp_path: Path) -> None:
    config = _shop(tmp_path, "local[2]")
    store = CoordinationStore(f"sqlite:///{tmp_path / '.sparkindex' / 'state.db'}")  # what a first run creates
    store.engine.dispose()
    assert checks_of(config)["store.schema"].status == "OK"

    def set_version(version: int) -> None:
        engine = sa.create_engine(f"sqlite:///{tmp_path / '.sparkindex' / 'state.db'}")
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE si_schema SET version = :v"), {"v": version})
        engine.dispose()

    set_version(SCHEMA_VERSION - 1)
    older = checks_of(config)["store.schema"]
    assert older.status == "WARN" and f"migrates it to v{SCHEMA_VERSION}" in older.detail, older
    set_version(SCHEMA_VERSION + 1)
    newer = checks_of(config)["store.schema"]
    assert newer.status == "FAIL" and newer.fix is not None and "upgrade sparkindex" in newer.fix, newer


@pytest.mark.cluster
@pytest.mark.slow
def test_spark_master_down_then_started(tmp_path: Path) -> None:
    from tests.cluster.standalone import StandaloneCluster

    port = free_port()
    config = _shop(tmp_path, f"spark://127.0.0.1:{port}", "  url: sqlite:////nonexistent-dir/state.db\n")
    master = checks_of(config)["spark.master"]
    assert master.status == "FAIL" and master.transient, master
    assert master.fix is not None and "deploy.master.Master" in master.fix
    cluster = StandaloneCluster(tmp_path / "spark", workers=0, master_port=port).start()  # the fix
    try:
        assert checks_of(config)["spark.master"].status == "OK"
    finally:
        cluster.stop()


def test_a_state_folder_with_a_store_named_beside_the_pipeline_is_warned(tmp_path: Path) -> None:
    """The shop's pipeline names its SQLite store (``.sparkindex/state.db``) explicitly: a state
    folder moves only the default store, so this one would still be written beside the file."""
    config = _shop(tmp_path / "shop", "local[2]")
    named = run_checks(load_pipeline(config, state_dir=tmp_path / "state"), Options())
    [beside] = [c for c in named if c.name == "store.state_dir"]
    assert beside.status == "WARN" and str(tmp_path / "state") in beside.detail, beside
    assert beside.fix is not None and "leave coordination.url out" in beside.fix
    # without a state folder, or with the store left to the default, nothing to say
    assert "store.state_dir" not in checks_of(config)
    text = config.read_text(encoding="utf-8").replace("coordination:\n  url: sqlite:///.sparkindex/state.db\n", "")
    config.write_text(text, encoding="utf-8")
    default = run_checks(load_pipeline(config, state_dir=tmp_path / "state"), Options())
    assert "store.state_dir" not in [c.name for c in default]

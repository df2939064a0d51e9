"""Helpers for the guarantee tests: throw-away PostgreSQL tables, small pipelines, planted documents."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
import tantivy

from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.documents.builder import BuiltDocument
from sparkindex.targets.tantivy import TantivyTarget
from sparkindex.targets.tantivy.client import MAPPING_FILE
from sparkindex.targets.tantivy.schema import build_schema, to_tantivy_json
from sparkindex.targets.tantivy.wire import service_address
from tests.e2e.shop import wait_for


@contextlib.contextmanager
def pg_table(server_url: str, columns_ddl: str, rows: Sequence[tuple[Any, ...]], prefix: str) -> Iterator[str]:
    """A table of its own (unique name) in the test database, filled with *rows*, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(normalize_url(server_url))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE TABLE {name} ({columns_ddl})")
            marks = ", ".join(["%s"] * len(rows[0]))
            conn.exec_driver_sql(f"INSERT INTO {name} VALUES ({marks})", list(rows))
        yield name
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
        engine.dispose()


def write_pipeline(
    directory: Path, source_url: str, alias: str, table: str, index_yaml: str = "", job_yaml: str = ""
) -> Pipeline:
    """A one-index pipeline over *table*, its store and Tantivy index beside the file."""
    directory.mkdir(parents=True, exist_ok=True)
    text = (
        f"source:\n  url: {source_url}\n"
        "target:\n  url: tantivy://index\n"
        "spark:\n  master: local[2,4]\n"
        f"indexes:\n  - alias: {alias}\n    table: {table}\n{index_yaml}"
        f"job:\n  batch_size: 500\n{job_yaml}"
    )
    (directory / "pipeline.yaml").write_text(text, encoding="utf-8")
    return load_pipeline(directory / "pipeline.yaml")


def tantivy_body(root: Path, index: str, doc: BuiltDocument) -> str:
    """The Tantivy JSON the target would write for *doc* into *index* (its sort key and range
    check included: a second copy written so is what a lost delete leaves)."""
    _, plan = build_schema(orjson.loads((root / index / MAPPING_FILE).read_bytes()))
    return to_tantivy_json(doc.bulk_item(), plan).decode()


def plant_raw(root: Path, index: str, bodies: Sequence[str]) -> None:
    """Add documents with a raw Tantivy writer, no delete first (a second copy of an ``_id`` stays
    a second copy). No writer service may run on *index* (``finish_version`` stops it)."""
    schema, _ = build_schema(orjson.loads((root / index / MAPPING_FILE).read_bytes()))
    idx = tantivy.Index(schema, path=str(root / index), reuse=True)
    writer = idx.writer(32 * 1024 * 1024, 1)
    for body in bodies:
        writer.add_json(body)
    writer.commit()
    writer.wait_merging_threads()  # consumes the writer: Tantivy's directory lock is released


def service_gone(index_dir: Path) -> bool:
    """No writer service answers for *index_dir* any more (its address refuses connections)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(service_address(index_dir))
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    finally:
        sock.close()
    return False


def finish_and_wait(target: TantivyTarget, index: str) -> None:
    """``finish_version``, then wait until its writer service has exited (it keeps its address for
    a moment after answering, and a request reaching it then is reset)."""
    target.finish_version(index)
    wait_for(lambda: service_gone(target.root / index), 30, f"the writer service of {index} to exit")


def run_cli(cli: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The ``sparkindex`` command as a user runs it, output captured as text."""
    return subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=timeout)

"""``sparkindex init`` as a user runs it: the file, the summary, and bad input as one line, exit 2.
No Spark here; the PostgreSQL tests need only a connection."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from tests.scaffold.helpers import rich_sqlite


def run(cli: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cli), "init", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rich")
    rich_sqlite(folder)
    return folder


def test_init_writes_the_file_and_says_what_to_run_next(cli: Path, rich: Path, tmp_path: Path) -> None:
    out = tmp_path / "pipeline.yaml"
    done = run(cli, "--source", f"sqlite:///{rich / 'source.db'}", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(out.read_text())["indexes"][0]["alias"] == "lineitem"
    assert "lineitem" in done.stderr and "audit_log" in done.stderr  # indexed, and left out with why
    assert f"sparkindex reindex -c {out}" in done.stderr
    # the file is not overwritten by accident
    again = one_line_error(run(cli, "--source", f"sqlite:///{rich / 'source.db'}", "-o", str(out)))
    assert str(out) in again and "--force" in again
    forced = run(cli, "--source", f"sqlite:///{rich / 'source.db'}", "-o", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    folder = one_line_error(run(cli, "--source", f"sqlite:///{rich / 'source.db'}", "-o", str(tmp_path)))
    assert "folder" in folder


def test_init_to_stdout(cli: Path, rich: Path) -> None:
    done = run(cli, "--source", f"sqlite:///{rich / 'source.db'}", "--table", "book", "-o", "-")
    assert done.returncode == 0, done.stderr
    assert [i["alias"] for i in yaml.safe_load(done.stdout)["indexes"]] == ["book"]


def test_unknown_table_names_it_and_the_known_ones(cli: Path, rich: Path, tmp_path: Path) -> None:
    line = one_line_error(
        run(cli, "--source", f"sqlite:///{rich / 'source.db'}", "--table", "lineitems", "-o", str(tmp_path / "p.yaml"))
    )
    assert "'lineitems'" in line and "lineitem" in line
    assert not (tmp_path / "p.yaml").exists()


def test_missing_sqlite_file_is_not_created(cli: Path, tmp_path: Path) -> None:
    line = one_line_error(run(cli, "--source", f"sqlite:///{tmp_path / 'nope.db'}", "-o", str(tmp_path / "p.yaml")))
    assert "nope.db" in line
    assert not (tmp_path / "nope.db").exists()


def test_a_database_without_tables(cli: Path, tmp_path: Path) -> None:
    sa.create_engine(f"sqlite:///{tmp_path / 'empty.db'}").connect().close()
    line = one_line_error(run(cli, "--source", f"sqlite:///{tmp_path / 'empty.db'}", "-o", str(tmp_path / "p.yaml")))
    assert "no tables" in line


def test_bad_depth_and_unknown_target_are_usage_errors(cli: Path, rich: Path, tmp_path: Path) -> None:
    src = f"sqlite:///{rich / 'source.db'}"
    assert run(cli, "--source", src, "--depth", "-1", "-o", str(tmp_path / "p.yaml")).returncode == 2
    line = one_line_error(run(cli, "--source", src, "--target", "solr://x", "-o", str(tmp_path / "p.yaml")))
    assert "solr" in line


def test_unreachable_server_is_one_line_without_the_password(cli: Path, tmp_path: Path) -> None:
    line = one_line_error(
        run(cli, "--source", "postgresql://app:hunter2@127.0.0.1:9/shop", "-o", str(tmp_path / "p.yaml"))
    )
    assert "127.0.0.1:9" in line and "hunter2" not in line
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.postgres
def test_a_password_is_written_as_an_environment_variable(cli: Path, services: dict[str, str], tmp_path: Path) -> None:
    """The test server trusts every local connection, so a URL with a password reaches it."""
    url = sa.make_url(services["postgres"])
    name = "t_init_pw"
    admin = sa.create_engine(url.set(drivername="postgresql+psycopg"))
    with admin.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
        conn.exec_driver_sql(f'CREATE TABLE "{name}".thing (id integer PRIMARY KEY, label text)')
    try:
        secret = url.set(password="Sup3r$ecret").update_query_dict({"options": f"-csearch_path={name}"})
        out = tmp_path / "pipeline.yaml"
        done = run(cli, "--source", secret.render_as_string(hide_password=False), "-o", str(out))
        assert done.returncode == 0, done.stderr
        text = out.read_text()
        assert "Sup3r" not in text and "Sup3r" not in done.stderr + done.stdout
        assert "${SPARKINDEX_SOURCE_PASSWORD}" in yaml.safe_load(text)["source"]["url"]
        assert "SPARKINDEX_SOURCE_PASSWORD" in done.stderr
        from sparkindex.config.loader import load_pipeline

        loaded = load_pipeline(out, env={"SPARKINDEX_SOURCE_PASSWORD": "Sup3r$ecret"})
        assert sa.make_url(loaded.source.url).password == "Sup3r$ecret"
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        admin.dispose()


@pytest.mark.postgres
def test_log_capture_is_proposed_only_where_check_passes(cli: Path, services: dict[str, str], tmp_path: Path) -> None:
    """A role without REPLICATION on a wal_level=logical server: the change source's own check
    passes, but `check` (and the reindex's guard) fails the file if init writes `sync:` active.
    Init must leave it commented, naming the privilege; with the privilege it is written active."""
    url = sa.make_url(services["postgres"])
    schema, role = "t_init_norepl", "t_init_norepl_role"
    admin = sa.create_engine(url.set(drivername="postgresql+psycopg"))
    with admin.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN NOREPLICATION')
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}" AUTHORIZATION "{role}"')
        conn.exec_driver_sql(f'CREATE TABLE "{schema}".thing (id integer PRIMARY KEY, label text)')
        conn.exec_driver_sql(f'ALTER TABLE "{schema}".thing OWNER TO "{role}"')
    try:
        source = url.set(username=role).update_query_dict({"options": f"-csearch_path={schema}"})
        out = tmp_path / "pipeline.yaml"
        done = run(cli, "--source", source.render_as_string(hide_password=False), "-o", str(out))
        assert done.returncode == 0, done.stderr
        loaded = yaml.safe_load(out.read_text())
        assert "sync" not in loaded, out.read_text()
        assert "REPLICATION" in out.read_text()
        with admin.begin() as conn:
            conn.exec_driver_sql(f'ALTER ROLE "{role}" REPLICATION')
        done = run(cli, "--source", source.render_as_string(hide_password=False), "-o", str(out), "--force")
        assert done.returncode == 0, done.stderr
        assert yaml.safe_load(out.read_text())["sync"] == {"source": "log"}
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        admin.dispose()

"""A missing extra is one line naming the pip command, raised where the pipeline chooses the part
that needs it (exit code 2); the extras the code names are the ones pyproject.toml declares."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import orjson
import pytest

from sparkindex.errors import ConfigError
from sparkindex.extras import DRIVERS, EXTRAS, MissingExtra, missing_extra, require, require_driver
from tests.packaging.conftest import ROOT


def block(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make *modules* unimportable, as if their extra were not installed (undone after the test)."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def run_blocked(tmp_path: Path, blocked: list[str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``sparkindex <argv>`` in a process where *blocked* modules cannot be imported."""
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from sparkindex.cli.app import main\n"
        f"sys.argv = ['sparkindex', *{argv!r}]\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_require_imports_the_extra_or_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    require("postgres", "anything")  # installed (make test installs every extra): nothing happens
    block(monkeypatch, "MySQLdb")
    with pytest.raises(MissingExtra) as raised:
        require("mysql", "source.url: the MySQL/MariaDB source (mysql://)")
    assert str(raised.value) == (
        "source.url: the MySQL/MariaDB source (mysql://) needs the mysql extra: pip install 'sparkindex[mysql]'"
    )
    assert isinstance(raised.value, ConfigError) and raised.value.exit_code == 2
    assert raised.value.extra == "mysql"
    with pytest.raises(ValueError, match="unknown extra"):
        require("nosuch", "anything")


def test_a_module_that_is_there_but_does_not_load_is_named_with_its_reason(tmp_path: Path) -> None:
    broken = ImportError("libmariadb.so.3: cannot open shared object file:\n No such file", name="MySQLdb._mysql")
    error = missing_extra("mysql", "source.url: the MySQL/MariaDB source (mysql://)", broken)
    assert "\n" not in str(error)
    assert str(error) == (
        "source.url: the MySQL/MariaDB source (mysql://) needs the mysql extra: pip install 'sparkindex[mysql]' "
        "(MySQLdb._mysql is installed but does not load: libmariadb.so.3: cannot open shared object file: No such file)"
    )


@pytest.mark.parametrize(
    ("url", "blocked", "message"),
    [
        ("postgresql://u@h/db", "psycopg", "the PostgreSQL source (postgresql://) needs the postgres extra"),
        ("postgres://u@h/db", "psycopg", "the PostgreSQL source (postgresql://) needs the postgres extra"),
        ("postgresql+psycopg://u@h/db", "psycopg", "the PostgreSQL source (postgresql://) needs the postgres extra"),
        ("mysql://u@h/db", "MySQLdb", "the MySQL/MariaDB source (mysql://) needs the mysql extra"),
        ("mariadb://u@h/db", "MySQLdb", "the MySQL/MariaDB source (mysql://) needs the mysql extra"),
    ],
)
def test_require_driver_names_the_database_and_its_extra(
    monkeypatch: pytest.MonkeyPatch, url: str, blocked: str, message: str
) -> None:
    block(monkeypatch, blocked)
    with pytest.raises(MissingExtra, match=r"^source\.url: " + message.replace("(", r"\(").replace(")", r"\)")):
        require_driver(url, "source.url", "source")


def test_require_driver_leaves_sqlite_and_drivers_a_url_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    block(monkeypatch, "psycopg", "MySQLdb")
    for url in ("sqlite:///x.db", "mysql+pymysql://u@h/db", "postgresql+psycopg2://u@h/db", "tantivy:///x"):
        require_driver(url, "source.url", "source")


def test_every_opener_refuses_before_connecting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where a pipeline's URL chooses a part: its source, store and target, and an index to rebuild."""
    from sparkindex.coordination.engine import make_engine
    from sparkindex.resources import open_source_url, open_target_url

    block(monkeypatch, "MySQLdb", "psycopg", "opensearchpy", "elastic_transport")
    cases = [
        (
            lambda: open_source_url("mysql://u@127.0.0.1:9/db"),
            "source.url: the MySQL/MariaDB source (mysql://)",
            "mysql",
        ),
        (
            lambda: make_engine("postgresql://u@127.0.0.1:9/db"),
            "coordination.url: the PostgreSQL coordination store (postgresql://)",
            "postgres",
        ),
        (
            lambda: open_target_url("opensearchs://127.0.0.1:9", tmp_path),
            "target.url: the OpenSearch target (opensearchs://)",
            "opensearch",
        ),
        (
            lambda: open_source_url("elasticsearch://127.0.0.1:9", base_dir=tmp_path),
            "source.url: the Elasticsearch index to rebuild (elasticsearch://)",
            "elasticsearch",
        ),
    ]
    for open_it, what, extra in cases:
        with pytest.raises(MissingExtra) as raised:
            open_it()
        assert str(raised.value) == f"{what} needs the {extra} extra: pip install 'sparkindex[{extra}]'"


def test_the_server_package_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "sparkindex.server" or m.startswith("sparkindex.server.")]:
        monkeypatch.delitem(sys.modules, name)
    block(monkeypatch, "prometheus_client")
    with pytest.raises(MissingExtra, match=r"needs the server extra: pip install 'sparkindex\[server\]'$"):
        import sparkindex.server  # noqa: F401


def write_mysql_pipeline(folder: Path) -> None:
    """``pipeline.yaml`` in *folder*: a MySQL source no server answers, into Tantivy."""
    (folder / "pipeline.yaml").write_text(
        "source: {url: 'mysql://indexer@127.0.0.1:9/shop'}\n"
        "target: {url: 'tantivy://index'}\n"
        "indexes: [{alias: products, table: products}]\n",
        encoding="utf-8",
    )


def test_the_cli_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    """The command as a user runs it, in a process where the mysql extra's driver cannot be imported."""
    write_mysql_pipeline(tmp_path)
    done = run_blocked(tmp_path, ["MySQLdb"], ["explain", "-c", "pipeline.yaml"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "error: source.url: the MySQL/MariaDB source (mysql://) needs the mysql extra: pip install 'sparkindex[mysql]'"
    )


def test_the_extras_are_the_ones_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(declared), "every extra the code names is declared"
    assert set(declared) == {*EXTRAS, "all", "dev"}
    (everything,) = declared["all"]
    assert everything == f"sparkindex[{','.join(sorted(EXTRAS))}]", "all installs every extra"
    assert {extra for extra, _, _ in DRIVERS.values()} <= set(EXTRAS)
    for extra, modules in EXTRAS.items():  # make test installs them all: the import names are right
        require(extra, f"the {extra} extra")
        assert all(m in sys.modules for m in modules)


def test_mysql_change_capture_imports_without_its_extra_and_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its constants are read wherever change capture is weighed (``init`` of a PostgreSQL source
    too); only making a MySQL change source needs mysql-replication."""
    import importlib

    import sparkindex.sources.mysql as dialect

    name = "sparkindex.sources.mysql.changes"
    monkeypatch.setattr(dialect, "changes", importlib.import_module(name))  # restored after the test
    monkeypatch.delitem(sys.modules, name)
    block(monkeypatch, "pymysqlreplication")
    changes = importlib.import_module(name)
    assert changes.GRANTS and changes.REQUIRED
    with pytest.raises(MissingExtra, match=r"^MySQL/MariaDB change capture \(the binlog\) needs the mysql extra"):
        changes.MysqlChangeSource(None, None, [], "consumer")


def test_serve_without_the_server_extra_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(
        "source: {url: 'sqlite:///shop.db'}\nindexes: [{alias: products, table: products}]\n", encoding="utf-8"
    )
    done = run_blocked(tmp_path, ["uvicorn"], ["serve", "-c", "pipeline.yaml"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "error: sparkindex serve needs the server extra: pip install 'sparkindex[server]'"


def test_init_of_a_database_whose_driver_is_missing_names_the_extra(tmp_path: Path) -> None:
    done = run_blocked(tmp_path, ["MySQLdb"], ["init", "--source", "mysql://indexer@127.0.0.1:9/shop"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --source: the MySQL/MariaDB source (mysql://) needs the mysql extra: pip install 'sparkindex[mysql]'"
    )


def test_check_suggests_installing_the_missing_extra(tmp_path: Path) -> None:
    write_mysql_pipeline(tmp_path)
    done = run_blocked(tmp_path, ["MySQLdb"], ["check", "-c", "pipeline.yaml", "--json"])
    assert done.returncode == 2, done.stderr
    report = orjson.loads(done.stdout.strip().splitlines()[-1])
    [source] = [c for c in report["checks"] if c["name"] == "source.url"]
    assert source["status"] == "FAIL" and source["fix"] == "pip install 'sparkindex[mysql]'", source

"""``source.read_url`` and ``source.max_replica_lag_s`` in the pipeline file: ``${VAR}`` secrets as
for ``source.url``, hidden when printed; a replica of another kind of database, or of SQLite,
is refused naming the key (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkindex.config.loader import parse_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.errors import ConfigError

PIPELINE = """\
source:
  url: {url}
  read_url: {read_url}
{extra}indexes:
  - alias: products
    table: products
"""


def _parse(url: str, read_url: str, extra: str = "", env: dict[str, str] | None = None) -> Pipeline:
    text = PIPELINE.format(url=url, read_url=read_url, extra=extra)
    return parse_pipeline(text, origin="p.yaml", base_dir=Path("/tmp"), env=env or {})


def test_read_url_takes_secrets_from_the_environment_and_hides_them() -> None:
    pipeline = _parse("postgresql://u:${PW}@primary/shop", "postgresql://u:${PW}@replica/shop", env={"PW": "s3cr3t"})
    assert pipeline.source.read_url == "postgresql://u:s3cr3t@replica/shop"
    assert pipeline.read_source_url() == "postgresql://u:s3cr3t@replica/shop"
    assert pipeline.source.max_replica_lag_s == 300.0
    shown = repr(pipeline.source)
    assert "s3cr3t" not in shown and "replica/shop" in shown


def test_without_read_url_bulk_reads_go_to_the_primary() -> None:
    text = "source:\n  url: mysql://root@primary/shop\nindexes:\n  - {alias: products, table: products}\n"
    pipeline = parse_pipeline(text, origin="p.yaml", base_dir=Path("/tmp"), env={})
    assert pipeline.source.read_url is None
    assert pipeline.read_source_url() == pipeline.source_url()


def test_a_missing_secret_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="PW"):
        _parse("postgresql://u@primary/shop", "postgresql://u:${PW}@replica/shop")


@pytest.mark.parametrize(
    ("url", "read_url", "said"),
    [
        ("sqlite:///shop.db", "postgresql://u@replica/shop", "source.read_url"),
        ("sqlite:///shop.db", "sqlite:///copy.db", "SQLite"),
        ("postgresql://u@primary/shop", "mysql://u:hunter2@replica/shop", "same kind of database"),
        ("mysql://u@primary/shop", "postgres://u@replica/shop", "same kind of database"),
        ("postgresql://u@primary/shop", "tantivy://index", "postgresql:// or mysql://"),
    ],
)
def test_a_replica_of_another_kind_is_refused_naming_the_key(url: str, read_url: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _parse(url, read_url)
    assert "source.read_url" in str(caught.value) and said in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_the_lag_bound_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"source\.max_replica_lag_s"):
        _parse("postgresql://u@p/shop", "postgresql://u@r/shop", extra="  max_replica_lag_s: 0\n")


def test_mariadb_and_postgres_driver_spellings_are_one_kind() -> None:
    pipeline = _parse("mariadb://u@primary/shop", "mysql+mysqldb://u@replica/shop")
    assert pipeline.source.read_url == "mysql+mysqldb://u@replica/shop"
    pipeline = _parse("postgresql+psycopg://u@primary/shop", "postgres://u@replica/shop")
    assert pipeline.source.read_url == "postgres://u@replica/shop"

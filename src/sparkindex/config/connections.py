"""Where data comes from and goes to: the ``source``, ``coordination``, ``target`` and ``spark``
sections. Their URLs may hold passwords: ``repr`` hides them."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from sparkindex.config.base import Strict
from sparkindex.config.secrets import redact_url
from sparkindex.config.urls import database_kind

#: how far a replica may be behind the primary, by default, before a job refuses it
DEFAULT_MAX_REPLICA_LAG_S = 300.0


class SourceConfig(Strict):
    """The database (or index) documents are built from."""

    url: str = Field(
        description=(
            "sqlite:///file.db (relative to the pipeline file), postgresql://..., mysql://... (MySQL or"
            " MariaDB), or an index to rebuild: tantivy://dir, opensearch://host:9200"
        )
    )
    read_url: str | None = Field(
        default=None,
        description=(
            "a read replica of source.url (the same kind of database): full reindexes, verify and"
            " repair read rows there once it has replayed what the primary had committed; change"
            " capture always reads source.url"
        ),
    )
    max_replica_lag_s: float = Field(
        default=DEFAULT_MAX_REPLICA_LAG_S,
        gt=0,
        description="how long a job waits for source.read_url to replay the primary's position before it refuses",
    )

    @field_validator("read_url")
    @classmethod
    def _same_database_kind(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A replica is a copy of the primary's server: another kind of database (or SQLite, which
        has no replicas, or an index) cannot be one, and reading it would build another source."""
        if value is None:
            return None
        primary = info.data.get("url")
        replica_kind, primary_kind = database_kind(value), database_kind(primary) if isinstance(primary, str) else None
        if replica_kind not in ("postgresql", "mysql"):
            raise ValueError("must be a postgresql:// or mysql:// URL (SQLite and indexes have no read replicas)")
        if primary_kind == "sqlite":
            raise ValueError("source.url is SQLite, which has no read replicas; remove source.read_url")
        if primary_kind != replica_kind:
            raise ValueError(f"must be the same kind of database as source.url ({primary_kind}), not {replica_kind}")
        return value

    def __repr__(self) -> str:
        replica = "" if self.read_url is None else f", read_url={redact_url(self.read_url)!r}"
        return f"SourceConfig(url={redact_url(self.url)!r}{replica})"


class CoordinationConfig(Strict):
    """The SQL store of jobs, partitions, locks, dead letters and offsets (SQLite, PostgreSQL or
    MySQL/MariaDB); a Spark cluster needs PostgreSQL or MySQL/MariaDB."""

    url: str | None = Field(
        default=None,
        description="default: state.db in the state folder (.sparkindex beside the pipeline file, or --state-dir)",
    )
    prefix: str = Field(default="", description="lets several clusters share one store")


class TargetConfig(Strict):
    """The search backend the indexes are written to."""

    url: str = Field(
        default="tantivy://index",
        description=(
            "tantivy://dir (embedded, relative to the pipeline file), opensearch:// or elasticsearch://"
            " (opensearchs://, elasticsearchs:// for TLS; several hosts separated by commas)"
        ),
    )
    options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="the backend's own options (listed in docs/targets.md)"
    )

    def __repr__(self) -> str:
        # options may hold a password or an API key: show which keys are set, not their values
        return f"TargetConfig(url={redact_url(self.url)!r}, options={sorted(self.options)})"

    __str__ = __repr__


class SparkConfig(Strict):
    """The Spark session the jobs run on."""

    # local[N,F]: Spark only retries failed tasks in local mode when F is given.
    master: str = Field(
        default="local[*,4]",
        description="local[N,F] (N cores, F attempts per task: Spark retries locally only when F is given) or spark://host:7077",
    )
    app_name: str = Field(default="sparkindex", description="the application's name in Spark's UI")
    conf: dict[str, str] = Field(default_factory=dict, description="Spark properties, over sparkindex's defaults")
    class_data_sharing: bool = Field(
        default=True,
        description=(
            "the driver JVM starts from a class-data archive it writes on first use, kept in"
            " $SPARKINDEX_CACHE_DIR (default ~/.cache/sparkindex), about 150 MB"
        ),
    )

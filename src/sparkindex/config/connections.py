"""Where data comes from and goes to: the ``source``, ``coordination``, ``target`` and ``spark``
sections. Their URLs may hold passwords: ``repr`` hides them."""

from __future__ import annotations

from pydantic import Field

from sparkindex.config.base import Strict
from sparkindex.config.secrets import redact_url


class SourceConfig(Strict):
    """The database (or index) documents are built from."""

    url: str = Field(
        description=(
            "sqlite:///file.db (relative to the pipeline file), postgresql://..., mysql://... (MySQL or"
            " MariaDB), or an index to rebuild: tantivy://dir, opensearch://host:9200"
        )
    )

    def __repr__(self) -> str:
        return f"SourceConfig(url={redact_url(self.url)!r})"


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

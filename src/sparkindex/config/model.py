"""The pipeline model.

Every section forbids unknown keys, so a typo in the YAML fails loudly with its key path instead of
being ignored. Defaults follow the seeds (OpenMetadata's timeouts and partition limits).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from sparkindex.config.secrets import redact_url

FieldType = Literal["text", "keyword", "long", "double", "boolean", "date", "object", "nested"]


def _as_list(value: object) -> object:
    if isinstance(value, str):
        return [value]
    return value


KeyColumns = Annotated[list[str], BeforeValidator(_as_list)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class FieldOverride(_Strict):
    """Overrides what the SQL schema implies for one document field (dotted path)."""

    type: FieldType | None = None
    analyzer: str | None = None
    copy_to: KeyColumns = Field(default_factory=list)
    keyword: bool = Field(default=False, description="add a '<field>.keyword' exact-match sub-field")
    index: bool = True


class RelationConfig(_Strict):
    """A related table folded into the parent document.

    ``object``: many-to-one; the parent's ``local_key`` columns reference the child's ``remote_key``.
    ``nested``: one-to-many; the child's ``remote_key`` columns reference the parent's ``local_key``.
    ``join``: one-to-many like ``nested``, but each child row becomes a document of its own in the
    parent's index, routed to its parent (search engines' parent-child join; see
    :mod:`sparkindex.documents.join`). Keys left out are inferred from the foreign keys in the schema.
    """

    name: str
    type: Literal["object", "nested", "join"]
    table: str
    local_key: KeyColumns | None = None
    remote_key: KeyColumns | None = None
    columns: list[str] | None = None
    order_by: KeyColumns | None = None
    relations: list[RelationConfig] = Field(default_factory=list)
    #: join relations only: the child table's column whose value is each child document's
    #: external version (as ``indexes[].version`` is for the parents)
    version: str | None = None
    #: change capture: changes to this table (and below) are recorded and applied later by
    #: ``sync --apply-deferred`` or ``sync.deferred_at`` (search-center's delay effect)
    deferred: bool = False


_DURATION = re.compile(r"^(-1|0|\d+(nanos|micros|ms|s|m|h|d))$")


class _Open(BaseModel):
    """A definition the server interprets (its parameters are the server's business), whose few
    parameters sparkindex relies on are still checked."""

    model_config = ConfigDict(extra="allow")


class AnalyzerSettings(_Open):
    type: str | None = None
    tokenizer: str | None = None

    @model_validator(mode="after")
    def _custom_needs_tokenizer(self) -> AnalyzerSettings:
        if self.type in (None, "custom") and self.tokenizer is None:
            raise ValueError("a custom analyzer (no 'type', or type: custom) needs a 'tokenizer'")
        return self


class ComponentSettings(_Open):
    type: str


class AnalysisSettings(_Strict):
    analyzer: dict[str, AnalyzerSettings] = Field(default_factory=dict)
    normalizer: dict[str, _Open] = Field(default_factory=dict)
    tokenizer: dict[str, ComponentSettings] = Field(default_factory=dict)
    filter: dict[str, ComponentSettings] = Field(default_factory=dict)
    char_filter: dict[str, ComponentSettings] = Field(default_factory=dict)


def _nest_dotted(raw: dict[str, Any], into: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"a.b": 1}`` as ``{"a": {"b": 1}}``, the way the search engines read flat settings."""
    out: dict[str, Any] = {} if into is None else into
    for key, value in raw.items():
        *parents, leaf = str(key).split(".")
        node = out
        for part in [*parents, leaf] if isinstance(value, dict) else parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"{key!r}: {part!r} is set both to a value and to a group of settings")
            node = child
        if isinstance(value, dict):
            _nest_dotted(value, node)
        elif leaf in node:
            raise ValueError(f"{key!r}: {leaf!r} is given twice")
        else:
            node[leaf] = value
    return out


class IndexSettings(_Strict):
    """An index's own settings (``indexes[].settings``), as OpenSearch/Elasticsearch take them.

    Written nested (``analysis: {analyzer: ...}``), flat (``index.number_of_shards: 2``) or under
    ``index:``; normalised to the nested form without ``index``. A search-engine target creates
    the version with these plus bulk-load overrides (no replicas, no refresh) and restores these
    after the load; Tantivy has no such settings and ignores them. Unknown groups are refused so
    that a typo fails here rather than as a server error mid-job.
    """

    number_of_shards: int | None = Field(default=None, ge=1, le=1024)
    number_of_replicas: int | None = Field(default=None, ge=0)
    auto_expand_replicas: str | bool | None = None
    refresh_interval: str | None = None
    analysis: AnalysisSettings | None = None
    similarity: dict[str, _Open] | None = None
    max_result_window: int | None = Field(default=None, gt=0)
    max_inner_result_window: int | None = Field(default=None, gt=0)
    max_ngram_diff: int | None = Field(default=None, ge=0)
    max_shingle_diff: int | None = Field(default=None, ge=0)
    number_of_routing_shards: int | None = Field(default=None, ge=1)
    routing_partition_size: int | None = Field(default=None, ge=1)
    codec: str | None = None
    mapping: dict[str, Any] | None = Field(default=None, description="e.g. total_fields.limit")
    sort: dict[str, Any] | None = None
    query: dict[str, Any] | None = None
    highlight: dict[str, Any] | None = None
    knn: bool | None = None
    default_pipeline: str | None = None
    final_pipeline: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        nested = _nest_dotted(raw)
        inner = nested.pop("index", None)
        if inner is None:
            return nested
        if not isinstance(inner, dict):
            raise ValueError("'index' must be a group of settings")
        clash = sorted(set(inner) & set(nested))
        if clash:
            raise ValueError(f"{', '.join(clash)} given both inside and outside 'index'")
        return {**inner, **nested}

    @field_validator("refresh_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and not _DURATION.match(value):
            raise ValueError("expected a duration such as 1s, 500ms or 30s, or -1 to turn refresh off")
        return value

    def to_target(self) -> dict[str, Any]:
        """The settings to create the index with (only what the pipeline sets)."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


class MappingOverride(_Strict):
    """A partial OpenSearch/Elasticsearch mapping merged over the inferred one (``indexes[].mapping``).

    ``properties`` may only name fields the documents have (checked against the schema when the
    index is planned, :mod:`sparkindex.documents.overrides`); root options such as ``dynamic``
    apply as given.
    """

    dynamic: bool | Literal["strict"] | None = None
    date_detection: bool | None = None
    numeric_detection: bool | None = None
    dynamic_date_formats: list[str] | None = None
    dynamic_templates: list[dict[str, dict[str, Any]]] | None = None
    properties: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("dynamic", mode="before")
    @classmethod
    def _dynamic(cls, value: Any) -> Any:
        if isinstance(value, str) and value in ("true", "false"):
            return value == "true"
        if value is None or isinstance(value, bool) or value == "strict":
            return value
        raise ValueError("expected true, false or strict")

    def root_options(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True, exclude={"properties"})


class JoinConfig(_Strict):
    """The join field of an index with ``type: join`` relations."""

    field: str = Field(default="join", pattern=r"^[A-Za-z][A-Za-z0-9_\-]*$", description="the join field's name")
    #: the parents' name in the join field (the children's are their relation names); default:
    #: the index's table name
    parent: str | None = Field(default=None, pattern=r"^[^:]+$")


class ChangesConfig(_Strict):
    """Polling change capture (:mod:`sparkindex.changes.polling`): rows whose monotone ``column``
    moved past the last position, re-read with an ``overlap_s`` window for transactions that
    committed late; deletes from a ``tombstones`` table (its ``table`` names the deleted row's
    table, its ``key`` the deleted key as JSON) or, without one, a key diff every ``key_diff_every_s``."""

    column: str
    tables: dict[str, str] = Field(default_factory=dict, description="per-table column overrides")
    overlap_s: float = Field(default=5.0, ge=0)
    tombstones: str | None = None
    key_diff_every_s: float = Field(default=300.0, ge=1.0)  # each diff is a batch of its own
    #: documents per sort-key range of the key diff: each range is one Spark task
    key_diff_range_docs: int = Field(default=50_000, ge=1)


class SyncConfig(_Strict):
    """``sync``: continuous change capture (:mod:`sparkindex.changes`)."""

    source: Literal["auto", "log", "polling"] = "auto"
    group: str = Field(default="default", pattern=r"^[A-Za-z0-9_\-]+$", description="consumer group")
    slot: str = Field(default="sparkindex", pattern=r"^[a-z0-9_]{1,40}$", description="PostgreSQL slot prefix")
    lag_warn_bytes: int = Field(default=1 << 30, gt=0, description="warn when a slot retains more WAL")
    trigger_s: float = Field(default=0.5, gt=0, description="how often the stream looks for changes")
    max_batch_changes: int = Field(default=50_000, gt=0)
    catch_up_lag_s: float = Field(default=2.0, gt=0, description="a reindex swaps once this close to the head")
    deferred_at: str | None = Field(default=None, pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    #: where consumer offsets live: the coordination store, or an index of the target (the
    #: index-based-offsets seed: checkpoint and processed-event documents, OpenSearch/Elasticsearch)
    offsets: Literal["store", "target"] = "store"
    #: documents per Spark task when a TRUNCATE rebuilds every document of an index
    truncate_range_docs: int = Field(default=50_000, gt=0)
    offsets_index: str = Field(default="sparkindex-offsets", pattern=r"^[a-z0-9][a-z0-9_\-]*$", max_length=200)
    offsets_retention_days: float = Field(default=7.0, gt=0, description="processed-event documents kept")
    offsets_cache: int = Field(default=10_000, gt=0, description="checkpoints a sync remembers writing")
    #: whose offsets, in an offsets index several pipelines share (default: derived from the store)
    offsets_namespace: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_\-]{1,64}$")
    server_id: int = Field(default=7301, gt=0, description="MySQL/MariaDB replica server id")
    #: what a sync does when the log cannot serve its stored position (a slot dropped, binlogs
    #: purged, an alias without an offset): verify and repair the aliases on Spark, then stream
    #: from the new position; or refuse with exit 3, naming the gap
    on_gap: Literal["reconcile", "fail"] = "reconcile"


class IndexConfig(_Strict):
    """One alias: the root table, how to build its documents and how to split the work."""

    alias: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]*$", max_length=128)  # the store keys on it
    table: str
    id: KeyColumns | None = None
    columns: list[str] | None = None
    relations: list[RelationConfig] = Field(default_factory=list)
    fields: dict[str, FieldOverride] = Field(default_factory=dict)
    partition_size: int = Field(default=5000, gt=0)
    page_size: int = Field(default=1000, gt=0, le=100_000)
    complexity: float = Field(default=1.0, gt=0)
    priority: int = 0
    #: where documents are assembled: in Python (batched IN fetches) or in the database (JSON
    #: aggregation, PostgreSQL); "auto" takes what `make bench` measured faster for the dialect.
    build: Literal["auto", "python", "database"] = "auto"
    settings: IndexSettings = Field(default_factory=IndexSettings)
    mapping: MappingOverride = Field(default_factory=MappingOverride)
    #: a root-table column (a row version, updated_at) whose value is each document's external
    #: version: a write older than what the index holds loses (:mod:`sparkindex.documents.versions`)
    version: str | None = None
    join: JoinConfig | None = None
    #: change capture by polling (any database): ``{column: updated_at}``
    changes: ChangesConfig | None = None


class SourceConfig(_Strict):
    url: str

    def __repr__(self) -> str:
        return f"SourceConfig(url={redact_url(self.url)!r})"


class CoordinationConfig(_Strict):
    url: str | None = None
    prefix: str = Field(default="", description="lets several clusters share one store")


class TargetConfig(_Strict):
    url: str = "tantivy://index"
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)

    def __repr__(self) -> str:
        # options may hold a password or an API key: show which keys are set, not their values
        return f"TargetConfig(url={redact_url(self.url)!r}, options={sorted(self.options)})"

    __str__ = __repr__


class SparkConfig(_Strict):
    # local[N,F]: Spark only retries failed tasks in local mode when F is given.
    master: str = "local[*,4]"
    app_name: str = "sparkindex"
    conf: dict[str, str] = Field(default_factory=dict)
    #: the driver JVM starts from a class-data archive it writes on first use (spark/cds.py),
    #: kept in $SPARKINDEX_CACHE_DIR (default ~/.cache/sparkindex), about 150 MB
    class_data_sharing: bool = True


class JobConfig(_Strict):
    batch_size: int = Field(default=5000, gt=0, description="documents per bulk request")
    batch_bytes: int = Field(default=16 * 1024 * 1024, gt=0, description="bytes per bulk request")
    retries: int = Field(default=5, ge=0, description="attempts for a transient bulk/source failure")
    partition_retries: int = Field(default=3, ge=0, description="MAX_PARTITION_RETRIES")
    backoff_initial_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    lock_ttl_s: float = Field(default=300.0, gt=0)
    lock_refresh_s: float = Field(default=60.0, gt=0)
    claim_timeout_s: float = Field(default=300.0, gt=0)
    max_partitions_per_entity: int = Field(default=10_000, gt=0)
    max_total_partitions: int = Field(default=50_000, gt=0)
    keep_versions: int = Field(default=2, ge=1)
    max_passes: int = Field(default=5, ge=1, description="Spark passes over partitions left PENDING")
    recovery_max_age_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    reopen_after_s: float = Field(
        default=30.0, gt=0, description="a partition whose target is down stays CLOSED this long"
    )
    source_timeout_s: float = Field(default=600.0, gt=0, description="statement timeout for source queries")
    bulk_in_flight: int = Field(default=2, ge=1, le=16, description="bulks on their way per partition task")
    sync_every_s: float = Field(
        default=10.0, gt=0, description="how often written batches are made durable and their cursors saved"
    )


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_SPAN_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_span(value: Any) -> float:
    """Seconds of a span written ``90s``, ``30m``, ``24h``, ``30d``, ``2w`` or a number of seconds;
    shared by ``verify.every`` and ``gc --older-than`` so both read spans alike."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        m = _SPAN.match(str(value))
        if m is None:
            raise ValueError(f"expected a span such as 90s, 30m, 24h or 30d, got {value!r}")
        seconds = float(m[1]) * _SPAN_SECONDS[m[2] or "s"]
    if seconds <= 0:
        raise ValueError(f"a span must be positive, got {value!r}")
    return seconds


class VerifyConfig(_Strict):
    """``verify: {every: 24h}``: the periodic consistency check (search-center's daily check) that
    ``serve`` or ``sync`` runs between their own work; without ``every`` none is scheduled."""

    every: float | None = Field(default=None, description="seconds between checks (24h, 30m, 3600)")

    @field_validator("every", mode="before")
    @classmethod
    def _span(cls, value: Any) -> Any:
        return None if value is None else parse_span(value)


class Pipeline(_Strict):
    source: SourceConfig
    coordination: CoordinationConfig = Field(default_factory=CoordinationConfig)
    target: TargetConfig = Field(default_factory=TargetConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    indexes: list[IndexConfig] = Field(min_length=1)
    job: JobConfig = Field(default_factory=JobConfig)
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    sync: SyncConfig = Field(default_factory=SyncConfig)

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _origin: str = PrivateAttr(default="<pipeline>")

    @model_validator(mode="after")
    def _unique_aliases(self) -> Pipeline:
        seen: set[str] = set()
        for i, idx in enumerate(self.indexes):
            if idx.alias in seen:
                raise ValueError(f"indexes[{i}].alias: duplicate alias {idx.alias!r}")
            if self.sync.offsets == "target" and idx.alias == self.sync.offsets_index:
                raise ValueError(f"indexes[{i}].alias: {idx.alias!r} is also sync.offsets_index, where offsets live")
            seen.add(idx.alias)
        return self

    @property
    def base_dir(self) -> Path:
        return self._base_dir

    @property
    def origin(self) -> str:
        return self._origin

    def bind(self, base_dir: Path, origin: str) -> Pipeline:
        """Anchor relative paths (sqlite files, the tantivy root) to the pipeline file's folder."""
        self._base_dir = base_dir
        self._origin = origin
        return self

    def index(self, alias: str) -> IndexConfig:
        for idx in self.indexes:
            if idx.alias == alias:
                return idx
        from sparkindex.errors import UsageError

        known = ", ".join(i.alias for i in self.indexes)
        raise UsageError(f"{self._origin}: no index with alias {alias!r} (known: {known})")

    def coordination_url(self) -> str:
        if self.coordination.url:
            return resolve_sqlite_url(self.coordination.url, self._base_dir)
        return f"sqlite:///{(self._base_dir / '.sparkindex' / 'state.db').resolve()}"

    def namespace(self) -> str:
        """Whose server-side state this is (slots, offsets in a shared index): the pipeline's
        coordination store and prefix, hashed (the URL may hold a password), unless
        ``sync.offsets_namespace`` names it. Two pipelines that keep their coordination apart
        never share a slot or an offset."""
        if self.sync.offsets_namespace:
            return self.sync.offsets_namespace
        identity = f"{self.coordination_url()}|{self.coordination.prefix}"
        return hashlib.sha256(identity.encode()).hexdigest()[:16]

    def slot_namespace(self) -> str:
        """Whose replication slots these are: like :meth:`namespace`, but from the coordination
        store's URL without its password or query, so that rotating a password does not rename
        (and orphan, retaining WAL for ever) every slot of the pipeline."""
        if self.sync.offsets_namespace:
            return self.sync.offsets_namespace
        import sqlalchemy as sa

        url = sa.make_url(self.coordination_url()).set(password=None, query={})
        stable = url.render_as_string(hide_password=False)
        return hashlib.sha256(f"{stable}|{self.coordination.prefix}".encode()).hexdigest()[:16]

    def source_url(self) -> str:
        return resolve_tantivy_url(resolve_sqlite_url(self.source.url, self._base_dir), self._base_dir)

    def to_wire(self) -> dict[str, object]:
        """What Spark tasks need to rebuild this pipeline in another process."""
        return {"pipeline": self.model_dump(mode="json"), "base_dir": str(self._base_dir), "origin": self._origin}

    def wire_string(self) -> str:
        return orjson.dumps(self.to_wire()).decode()

    @classmethod
    def from_wire(cls, wire: dict[str, object]) -> Pipeline:
        p = cls.model_validate(wire["pipeline"])
        return p.bind(Path(str(wire["base_dir"])), str(wire["origin"]))


def resolve_sqlite_url(url: str, base_dir: Path) -> str:
    """``sqlite:///rel.db`` is relative to the pipeline file, not to wherever the command runs."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith("sqlite:////"):
        rel = url[len(prefix) :]
        if rel and not rel.startswith(":memory:"):
            path, _, query = rel.partition("?")
            resolved = (base_dir / path).resolve()
            return f"sqlite:///{resolved}" + (f"?{query}" if query else "")
    return url


def resolve_tantivy_url(url: str, base_dir: Path) -> str:
    """``tantivy://rel`` (an index to rebuild, as a source) is relative to the pipeline file too."""
    prefix = "tantivy://"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and len(url) > len(prefix):
        return f"{prefix}{(base_dir / url[len(prefix) :]).resolve()}"
    return url


DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+mysqldb",
    "mariadb": "mysql+mysqldb",
}


def normalize_url(url: str) -> str:
    """Plain ``postgresql://`` / ``mysql://`` URLs get the drivers sparkindex ships with."""
    scheme, sep, rest = url.partition("://")
    return f"{DRIVERS[scheme]}{sep}{rest}" if scheme in DRIVERS else url

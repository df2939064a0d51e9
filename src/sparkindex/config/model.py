"""The pipeline model: the root of the pipeline file.

Its sections live beside it: :mod:`~sparkindex.config.connections` (source, coordination, target,
spark), :mod:`~sparkindex.config.indexes` (``indexes[]``, with :mod:`~sparkindex.config.index_settings`),
:mod:`~sparkindex.config.job` (job, verify) and :mod:`~sparkindex.config.sync`. Every section forbids
unknown keys, so a typo in the YAML fails loudly with its key path instead of being ignored.
Defaults follow OpenMetadata's search indexing (its timeouts and partition limits).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
from pydantic import Field, PrivateAttr, model_validator

from sparkindex.config.base import Strict
from sparkindex.config.connections import CoordinationConfig, SourceConfig, SparkConfig, TargetConfig
from sparkindex.config.indexes import IndexConfig
from sparkindex.config.job import JobConfig, VerifyConfig
from sparkindex.config.sync import SyncConfig
from sparkindex.config.urls import resolve_sqlite_url, resolve_tantivy_url

#: the state folder beside a pipeline file, when no other is given
STATE_FOLDER = ".sparkindex"
#: the environment variable that moves the state folder (as ``--state-dir`` does)
STATE_DIR_ENV = "SPARKINDEX_STATE_DIR"


class Pipeline(Strict):
    """A pipeline file: what to index (``indexes``) from where (``source``) into what (``target``),
    coordinated through ``coordination`` and run on ``spark``. Aliases are unique, and none may be
    ``sync.offsets_index`` when offsets live in the target."""

    source: SourceConfig = Field(description="the database (or index) documents are built from")
    coordination: CoordinationConfig = Field(
        default_factory=CoordinationConfig, description="the store of jobs, partitions, locks and offsets"
    )
    target: TargetConfig = Field(default_factory=TargetConfig, description="the search backend")
    spark: SparkConfig = Field(default_factory=SparkConfig, description="the Spark session")
    indexes: list[IndexConfig] = Field(min_length=1, description="one entry per alias")
    job: JobConfig = Field(default_factory=JobConfig, description="batches, retries, leases and limits")
    verify: VerifyConfig = Field(default_factory=VerifyConfig, description="the scheduled consistency check")
    sync: SyncConfig = Field(default_factory=SyncConfig, description="change capture (sparkindex sync)")

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _origin: str = PrivateAttr(default="<pipeline>")
    _state_dir: Path | None = PrivateAttr(default=None)

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

    @property
    def state_dir(self) -> Path:
        """Where sparkindex writes what it keeps of its own: the default coordination store
        (``state.db``), Spark's log (``spark.log``) and the progress server's action logs
        (``server/``). ``.sparkindex`` beside the pipeline file unless the run was given one
        (``--state-dir``, ``SPARKINDEX_STATE_DIR``): then the pipeline's folder is only read,
        so it may be a read-only mount."""
        return self._state_dir if self._state_dir is not None else self._base_dir / STATE_FOLDER

    @property
    def state_dir_given(self) -> bool:
        """Whether the run was given a state folder (so the pipeline's folder should be only read)."""
        return self._state_dir is not None

    def bind(self, base_dir: Path, origin: str, state_dir: Path | None = None) -> Pipeline:
        """Anchor relative paths (sqlite files, the tantivy root) to the pipeline file's folder,
        and keep state in *state_dir* (default: ``.sparkindex`` in that folder)."""
        self._base_dir = base_dir
        self._origin = origin
        self._state_dir = state_dir.resolve() if state_dir is not None else None
        return self

    def with_state_dir(self, state_dir: Path | None) -> Pipeline:
        """This pipeline keeping its state in *state_dir* (None: as it was)."""
        if state_dir is None:
            return self
        return self.model_copy().bind(self._base_dir, self._origin, state_dir)

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
        return f"sqlite:///{(self.state_dir / 'state.db').resolve()}"

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

    def read_source_url(self) -> str:
        """Where bulk reads go (a full reindex's partitions, verify, repair): ``source.read_url``
        when set, else the primary, ``source.url``. Change capture always uses the primary."""
        return self.source.read_url or self.source_url()

    def to_wire(self) -> dict[str, object]:
        """What Spark tasks need to rebuild this pipeline in another process."""
        return {
            "pipeline": self.model_dump(mode="json"),
            "base_dir": str(self._base_dir),
            "origin": self._origin,
            "state_dir": None if self._state_dir is None else str(self._state_dir),
        }

    def wire_string(self) -> str:
        return orjson.dumps(self.to_wire()).decode()

    @classmethod
    def from_wire(cls, wire: dict[str, object]) -> Pipeline:
        p = cls.model_validate(wire["pipeline"])
        state = wire.get("state_dir")
        return p.bind(Path(str(wire["base_dir"])), str(wire["origin"]), None if state is None else Path(str(state)))

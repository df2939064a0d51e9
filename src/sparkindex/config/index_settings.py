"""An index's own settings and mapping override, as OpenSearch/Elasticsearch take them
(``indexes[].settings``, ``indexes[].mapping``)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sparkindex.config.base import Open, Strict

_DURATION = re.compile(r"^(-1|0|\d+(nanos|micros|ms|s|m|h|d))$")


class AnalyzerSettings(Open):
    """One analyzer of ``analysis.analyzer``; its other parameters go to the server as written.
    A custom analyzer (no ``type``, or ``type: custom``) needs a ``tokenizer``."""

    type: str | None = Field(default=None, description="a built-in analyzer type, or custom (the default)")
    tokenizer: str | None = Field(default=None, description="the tokenizer of a custom analyzer (required there)")

    @model_validator(mode="after")
    def _custom_needs_tokenizer(self) -> AnalyzerSettings:
        if self.type in (None, "custom") and self.tokenizer is None:
            raise ValueError("a custom analyzer (no 'type', or type: custom) needs a 'tokenizer'")
        return self


class ComponentSettings(Open):
    """A tokenizer, token filter or character filter; its other parameters go to the server as written."""

    type: str = Field(description="the component's type, as the server names it")


class AnalysisSettings(Strict):
    """Text analysis components, by name."""

    analyzer: dict[str, AnalyzerSettings] = Field(default_factory=dict, description="analyzers, by name")
    normalizer: dict[str, Open] = Field(
        default_factory=dict, description="normalizers (for keyword fields), by name, passed as written"
    )
    tokenizer: dict[str, ComponentSettings] = Field(default_factory=dict, description="tokenizers, by name")
    filter: dict[str, ComponentSettings] = Field(default_factory=dict, description="token filters, by name")
    char_filter: dict[str, ComponentSettings] = Field(default_factory=dict, description="character filters, by name")


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


class IndexSettings(Strict):
    """An index's own settings (``indexes[].settings``), as OpenSearch/Elasticsearch take them.

    Written nested (``analysis: {analyzer: ...}``), flat (``index.number_of_shards: 2``) or under
    ``index:``; normalised to the nested form without ``index``. A search-engine target creates
    the version with these plus bulk-load overrides (no replicas, no refresh) and restores these
    after the load; Tantivy has no such settings and ignores them. Unknown groups are refused so
    that a typo fails here rather than as a server error mid-job.
    """

    number_of_shards: int | None = Field(default=None, ge=1, le=1024, description="primary shards")
    number_of_replicas: int | None = Field(
        default=None, ge=0, description="replicas per shard, restored after the bulk load (which runs with 0)"
    )
    auto_expand_replicas: str | bool | None = Field(default=None, description="e.g. 0-1 or 0-all")
    refresh_interval: str | None = Field(
        default=None,
        description="a duration such as 1s, or -1 for none; restored after the bulk load (which runs with -1)",
    )
    analysis: AnalysisSettings | None = Field(default=None, description="analyzers and their components")
    similarity: dict[str, Open] | None = Field(default=None, description="scoring models, by name, passed as written")
    max_result_window: int | None = Field(default=None, gt=0, description="the largest from + size of a search")
    max_inner_result_window: int | None = Field(default=None, gt=0, description="the same for inner hits")
    max_ngram_diff: int | None = Field(default=None, ge=0, description="largest max_gram - min_gram of n-gram filters")
    max_shingle_diff: int | None = Field(default=None, ge=0, description="the same for shingle filters")
    number_of_routing_shards: int | None = Field(default=None, ge=1, description="how far the index can be split")
    routing_partition_size: int | None = Field(default=None, ge=1, description="shards a custom routing value spans")
    codec: str | None = Field(default=None, description="stored fields compression, e.g. best_compression")
    mapping: dict[str, Any] | None = Field(default=None, description="mapping limits, e.g. total_fields.limit")
    sort: dict[str, Any] | None = Field(default=None, description="index sorting (field, order)")
    query: dict[str, Any] | None = Field(default=None, description="query defaults, e.g. default_field")
    highlight: dict[str, Any] | None = Field(default=None, description="highlighting limits, e.g. max_analyzed_offset")
    knn: bool | None = Field(default=None, description="OpenSearch: enable k-NN vector search")
    default_pipeline: str | None = Field(default=None, description="ingest pipeline run on every write")
    final_pipeline: str | None = Field(default=None, description="ingest pipeline run after all others")

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


class MappingOverride(Strict):
    """A partial OpenSearch/Elasticsearch mapping merged over the inferred one (``indexes[].mapping``).

    ``properties`` may only name fields the documents have (checked against the schema when the
    index is planned, :mod:`sparkindex.documents.overrides`); root options such as ``dynamic``
    apply as given.
    """

    dynamic: bool | Literal["strict"] | None = Field(
        default=None, description="what the index does with fields the mapping lacks: true, false or strict"
    )
    date_detection: bool | None = Field(default=None, description="detect dates in unmapped string fields")
    numeric_detection: bool | None = Field(default=None, description="detect numbers in unmapped string fields")
    dynamic_date_formats: list[str] | None = Field(default=None, description="formats date detection accepts")
    dynamic_templates: list[dict[str, dict[str, Any]]] | None = Field(
        default=None, description="templates for unmapped fields, passed as written"
    )
    properties: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="field mappings merged over the inferred ones, by field name"
    )

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

"""Documents read from another index: the plan, the new mapping and the builder of an
index-to-index rebuild (a pipeline whose source is an index, :mod:`sparkindex.index_source`).

The documents exist already, so there is nothing to assemble: each keeps its id and its sort key
(ranges and cursors of the new version mean what they meant in the old one), its source is
re-encoded canonically and its content hash recomputed. What changes is the mapping: the source
index's own, cut to ``columns`` when given, with the pipeline's ``fields`` and ``mapping``
overrides applied - how a user changes an analyzer without touching the database.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from sparkindex.checksums import document_check
from sparkindex.config.indexes import IndexConfig
from sparkindex.documents.builder import BuiltDocument, DocumentBuilder, Key, Page
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.mapping import Mapping, with_overrides
from sparkindex.documents.plan import IndexPlan
from sparkindex.documents.transforming import TransformCache
from sparkindex.errors import ConfigError, DocumentError, PermanentError
from sparkindex.index_source.columns import ID_COLUMN, copy_targets, source_fields
from sparkindex.index_source.source import IndexSource
from sparkindex.sources.base import KeyRange

#: Index settings that make no sense when the documents come from an index, and why.
_REFUSED = {
    "id": "documents keep the ids they have in the source index",
    "relations": "the source index's documents are already assembled",
    "version": "an index source has no version column",
    "join": "join children cannot be rebuilt from another index",
    "changes": "change capture reads databases, not indexes",
    "where": "row filters are SQL, evaluated by a database",
    "computed": "computed fields are SQL expressions, evaluated by a database",
    "exclude": "name the fields to keep with columns instead",
    "routing": "the copied documents keep the index's shards as the new index places them",
    "transform": "documents are copied as they are stored",
}


def _check_config(cfg: IndexConfig, where: str) -> None:
    for key, why in _REFUSED.items():
        if getattr(cfg, key):
            raise ConfigError(f"{where}.{key}: not available when the source is an index ({why}); remove it")
    renamed = [path for path, f in cfg.fields.items() if f.from_ is not None]
    if renamed:
        raise ConfigError(
            f"{where}.fields.{renamed[0]}.from: not available when the source is an index (renames read "
            "database columns); remove it"
        )
    if cfg.deletes != "hard":
        raise ConfigError(f"{where}.deletes: an index source has no change capture, so no deletes to soften")
    if cfg.build != "auto":
        raise ConfigError(f"{where}.build: documents from an index are copied, not built; remove build: {cfg.build}")


def _kept_properties(mapping: Mapping, emit: Sequence[str]) -> dict[str, Any]:
    """The source's properties of the kept fields, plus the fields they copy values into."""
    props: dict[str, Any] = copy.deepcopy(mapping.get("properties", {}))
    kept = {name: props[name] for name in emit}
    for target in copy_targets(kept):
        if target in props:
            kept[target] = props[target]
    return kept


def resolve_index_source(source: IndexSource, cfg: IndexConfig, where: str) -> tuple[IndexPlan, Mapping]:
    """The plan and the new mapping of an index rebuilt from the index ``cfg.table``."""
    _check_config(cfg, where)
    table = source.table(cfg.table, f"{where}.table")
    mapping = source.mapping(cfg.table, f"{where}.table")
    fields = source_fields(mapping)
    emit = list(cfg.columns) if cfg.columns is not None else fields
    unknown = [c for c in emit if c not in fields]
    if unknown:
        raise ConfigError(
            f"{where}.columns: no field {', '.join(map(repr, unknown))} in index {cfg.table!r} (fields: {fields})"
        )
    plan = IndexPlan(cfg, table, [ID_COLUMN], emit, [])
    root = {k: v for k, v in mapping.items() if k != "properties"}
    return plan, {**root, **with_overrides(plan, _kept_properties(mapping, emit), where)}


class IndexDocumentBuilder(DocumentBuilder):
    """Pages of documents copied from the source index (see the module's docstring)."""

    def __init__(self, source: IndexSource, plan: IndexPlan, transform_cache: TransformCache | None = None) -> None:
        super().__init__(source, plan)
        self.index_source = source
        # the whole stored source, unless the pipeline chose columns
        self._fields = None if plan.config.columns is None else list(plan.emit)

    def page(self, rng: KeyRange, after: tuple[Any, ...] | None, limit: int) -> Page:
        stored = self.index_source.read_documents(self.plan.table, rng, after, limit, self._fields)
        docs: list[BuiltDocument] = []
        failures: list[DocumentError] = []
        for doc in stored:
            if doc.sort_key is None:
                raise PermanentError(f"index {self.plan.table.name!r} returned document {doc.id!r} without a sort key")
            try:
                canonical = dumps_document(doc.source)
            except TypeError as exc:  # an integer beyond 64 bits, say
                failures.append(DocumentError(doc.id, str(exc), "UnserializableValue"))
                continue
            docs.append(
                BuiltDocument(
                    doc.id,
                    canonical,
                    content_hash(canonical),
                    doc.source,
                    doc.sort_key,
                    check=document_check(doc.id, canonical),
                )
            )
        last = (stored[-1].sort_key,) if stored else None
        return Page(docs, failures, len(stored), last)

    def by_keys(self, keys: Sequence[Key]) -> tuple[list[BuiltDocument], list[DocumentError], list[str]]:
        raise PermanentError(
            f"index {self.plan.table.name!r}: documents of an index source cannot be rebuilt one by one "
            "(change capture, dead-letter redrive); rerun the rebuild"
        )

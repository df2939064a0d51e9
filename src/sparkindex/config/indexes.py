"""One alias (``indexes[]``): its root table, the relations folded into its documents, field
overrides, and how its work is split."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from sparkindex.config.base import KeyColumns, Strict
from sparkindex.config.index_settings import IndexSettings, MappingOverride
from sparkindex.config.sync import ChangesConfig

FieldType = Literal["text", "keyword", "long", "double", "boolean", "date", "object", "nested"]


class FieldOverride(Strict):
    """Overrides what the SQL schema implies for one document field (dotted path)."""

    type: FieldType | None = Field(default=None, description="the field's type instead of the inferred one")
    analyzer: str | None = Field(default=None, description="the analyzer of a text field")
    copy_to: KeyColumns = Field(
        default_factory=list, description="fields this one's value is copied into (created as text fields)"
    )
    keyword: bool = Field(default=False, description="add a `<field>.keyword` exact-match sub-field")
    index: bool = Field(default=True, description="false: stored in the document but not searchable")
    from_: str | None = Field(
        default=None,
        alias="from",
        description=(
            "rename: the column this field's value comes from (`title: {from: name}`); a dotted path's"
            " last part is the new name, its prefix the relation it sits in (`reviews.stars: {from: rating}`)"
        ),
    )

    model_config = {"extra": "forbid", "populate_by_name": True}


#: a boolean SQL expression over one table's columns, in the source's dialect
FILTER_DESCRIPTION = (
    "a row filter: a boolean SQL expression over this table's columns, in the source's dialect"
    " (`deleted_at IS NULL`); only rows for which it is true are indexed"
)
COMPUTED_DESCRIPTION = (
    "fields computed by SQL expressions over this table's row, in the source's dialect"
    " (`full_name: \"first || ' ' || last\"`); typed in the mapping from the database's result type"
)
EXCLUDE_DESCRIPTION = "columns left out of the documents (they may still serve as keys, filters and routing)"


class TransformConfig(Strict):
    """A per-document Python function, run in the workers after the document is built."""

    function: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="`package.module:function`, taking the built document (a dict) and returning the one to index",
    )
    version: str = Field(
        default="1",
        min_length=1,
        description=(
            "the transform's version: part of every document's content hash, so changing it makes verify"
            " report every document stale and repair rebuild them"
        ),
    )
    on_change: list[str] | None = Field(
        default=None,
        min_length=1,
        description=(
            "expensive transforms (embeddings): the document fields the transform's output depends on."
            " It then runs only for documents whose values of these fields changed since the last run;"
            " the others get the fields it set then, from the coordination store's cache"
        ),
    )

    adds: list[str] = Field(
        default_factory=list,
        description=(
            "top-level fields the transform adds (an `embedding`), which `mapping.properties` may then declare"
            " with their type; any other unknown field there stays an error"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"function": value} if isinstance(value, str) else value


class RelationConfig(Strict):
    """A related table folded into the parent document.

    ``object``: many-to-one; the parent's ``local_key`` columns reference the child's ``remote_key``.
    ``nested``: one-to-many; the child's ``remote_key`` columns reference the parent's ``local_key``.
    ``join``: one-to-many like ``nested``, but each child row becomes a document of its own in the
    parent's index, routed to its parent (search engines' parent-child join; see
    :mod:`sparkindex.documents.join`). Keys left out are inferred from the foreign keys in the schema.
    """

    name: str = Field(description="the field the related rows go under")
    type: Literal["object", "nested", "join"] = Field(
        description="object (many-to-one), nested (one-to-many, an array) or join (child documents)"
    )
    table: str = Field(description="the related table")
    local_key: KeyColumns | None = Field(
        default=None, description="the parent's columns (default: from the foreign keys)"
    )
    remote_key: KeyColumns | None = Field(
        default=None, description="the child's columns (default: from the foreign keys)"
    )
    columns: list[str] | None = Field(default=None, description="the child's columns to include (default: all)")
    order_by: KeyColumns | None = Field(default=None, description="nested: the order of the array's elements")
    relations: list[RelationConfig] = Field(
        default_factory=list, description="relations of the related table (they nest)"
    )
    version: str | None = Field(
        default=None,
        description=(
            "join relations only: the child table's column whose value is each child document's"
            " external version (as indexes[].version is for the parents)"
        ),
    )
    deferred: bool = Field(
        default=False,
        description=(
            "change capture: changes to this table (and below) are recorded and applied later by"
            " sync --apply-deferred or sync.deferred_at (search-center's delay effect)"
        ),
    )
    where: str | None = Field(default=None, min_length=1, description=FILTER_DESCRIPTION)
    exclude: list[str] = Field(default_factory=list, description=EXCLUDE_DESCRIPTION)
    computed: dict[str, str] = Field(default_factory=dict, description=COMPUTED_DESCRIPTION)


class JoinConfig(Strict):
    """The join field of an index with ``type: join`` relations."""

    field: str = Field(default="join", pattern=r"^[A-Za-z][A-Za-z0-9_\-]*$", description="the join field's name")
    parent: str | None = Field(
        default=None,
        pattern=r"^[^:]+$",
        description=(
            "the parents' name in the join field (the children's are their relation names);"
            " default: the index's table name"
        ),
    )


class IndexConfig(Strict):
    """One alias: the root table, how to build its documents and how to split the work."""

    alias: str = Field(  # the store keys on it
        pattern=r"^[a-z0-9][a-z0-9_\-]*$",
        max_length=128,
        description="the alias readers search; versions are `<alias>_v<N>`. Unique in a coordination store",
    )
    table: str = Field(description="the root table (or, for an index source, the index or alias to read)")
    id: KeyColumns | None = Field(
        default=None,
        description="the document id: a primary key or a unique NOT NULL key (default: the primary key)",
    )
    columns: list[str] | None = Field(default=None, description="the root table's columns to include (default: all)")
    relations: list[RelationConfig] = Field(
        default_factory=list, description="related tables folded into each document"
    )
    fields: dict[str, FieldOverride] = Field(
        default_factory=dict, description="overrides of the inferred mapping, by dotted field path"
    )
    partition_size: int = Field(default=5000, gt=0, description="rows per partition of work")
    page_size: int = Field(default=1000, gt=0, le=100_000, description="rows per keyset page read from the source")
    complexity: float = Field(default=1.0, gt=0, description="weight of one row in work units (relations cost more)")
    priority: int = Field(default=0, description="higher partitions are processed first")
    build: Literal["auto", "python", "database"] = Field(
        default="auto",
        description=(
            "where documents are assembled: in Python (batched IN fetches) or in the database (JSON"
            " aggregation, PostgreSQL); auto takes what `make bench` measured faster for the dialect"
        ),
    )
    settings: IndexSettings = Field(
        default_factory=IndexSettings, description="the index's own settings, restored after the bulk load"
    )
    mapping: MappingOverride = Field(
        default_factory=MappingOverride, description="a partial mapping merged over the inferred one"
    )
    version: str | None = Field(
        default=None,
        description=(
            "a root-table column (a row version, updated_at) whose value is each document's external"
            " version: a write older than what the index holds loses"
        ),
    )
    join: JoinConfig | None = Field(default=None, description="the join field, for type: join relations")
    changes: ChangesConfig | None = Field(
        default=None, description="change capture by polling (any database): {column: updated_at}"
    )
    where: str | None = Field(default=None, min_length=1, description=FILTER_DESCRIPTION)
    exclude: list[str] = Field(default_factory=list, description=EXCLUDE_DESCRIPTION)
    computed: dict[str, str] = Field(default_factory=dict, description=COMPUTED_DESCRIPTION)
    routing: str | None = Field(
        default=None,
        description=(
            "a root-table column whose value routes each document to its shard (`_routing`;"
            " OpenSearch and Elasticsearch only)"
        ),
    )
    deletes: Literal["hard", "soft"] = Field(
        default="hard",
        description=(
            "hard: a deleted (or filtered-out) row's document is removed; soft: it stays, marked"
            ' `{"_deleted": true, "_deleted_at": <time>}`'
        ),
    )
    transform: TransformConfig | None = Field(
        default=None, description="a per-document Python transform (`package.module:function`, or its settings)"
    )

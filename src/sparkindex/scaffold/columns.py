"""Which columns of a table become document fields, and why some do not.

Free text is what people search, so long text is kept (and named in a comment, because it makes
documents large). Binary data searches nothing and bloats every document (base64), so it is left
out; so are types no search mapping is inferred for. Names the index uses for its own fields
are left out too. Key columns are read whether listed or not, so relations keep working.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkindex.scaffold.reflect import TableFacts

#: field names the targets keep for themselves (Tantivy's stored fields, the engines' metadata)
RESERVED = frozenset(
    {"_id", "_key", "_hash", "_check_hi", "_check_lo", "_source", "_routing", "_version", "_index", "_seq_no"}
)


@dataclass(frozen=True)
class ColumnChoice:
    kept: tuple[str, ...]
    #: (column, why) for every column left out
    left_out: tuple[tuple[str, str], ...]
    #: kept columns of unbounded (or very long) text
    large_text: tuple[str, ...]

    @property
    def explicit(self) -> list[str] | None:
        """The ``columns:`` list to write: None (every column) unless something is left out."""
        return list(self.kept) if self.left_out else None

    def notes(self) -> list[str]:
        """The comments that explain the choice, one per kind of choice."""
        out: list[str] = []
        if self.large_text:
            out.append(
                f"large text kept as full text: {', '.join(self.large_text)} "
                "(documents grow with it; list columns without it to leave it out)"
            )
        for name, why in self.left_out:
            out.append(f"{name} left out: {why}")
        return out


def choose_columns(table: TableFacts) -> ColumnChoice:
    kept: list[str] = []
    left_out: list[tuple[str, str]] = []
    large: list[str] = []
    # identifiers are text without bound in many schemas (PostgreSQL's `text` keys), yet short:
    # the note on large text is for the prose that makes documents grow
    keys = {c for key in (table.primary_key, *table.unique_keys) for c in key}
    keys.update(c for ref in table.references for c in ref.columns)
    for col in table.columns:
        if col.name in RESERVED:
            left_out.append((col.name, "the index keeps this name for its own field"))
        elif col.category == "binary":
            left_out.append(
                (col.name, f"binary data ({col.type_name}) is not searchable; add it to columns to keep it (as base64)")
            )
        elif col.category == "set":
            left_out.append((col.name, f"{col.type_name} values arrive as sets, which documents cannot encode yet"))
        elif col.category == "unsupported":
            left_out.append((col.name, f"{col.type_name} has no inferred search mapping, so it is not guessed at"))
        else:
            kept.append(col.name)
            if col.category == "large_text" and col.name not in keys:
                large.append(col.name)
    return ColumnChoice(tuple(kept), tuple(left_out), tuple(large))

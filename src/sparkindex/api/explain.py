"""``api.explain``: one real document of an alias, its mapping, how it is built and the partition
plan (``sparkindex explain``), as a frozen result.

The work is :mod:`sparkindex.jobs.explain`'s (the reindex's own plan, builder and partition
calculator). It reads the source only and writes nothing, so it runs no preflight: it is what a
person runs while something is still wrong, and a refusal would hide the very document they came
to see.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import orjson

from sparkindex.api.loading import PipelineArg, load
from sparkindex.api.results import Outcome

if TYPE_CHECKING:  # the CLI imports this package on every start; explaining imports them when it runs
    from sparkindex.jobs.explain import BuildPath, Explanation
    from sparkindex.jobs.explain_partitions import PartitionPlan

__all__ = ["ExplainResult", "explain", "explain_result"]


@dataclass(frozen=True)
class ExplainResult:
    """``explain --json``. ``outcome`` is DONE_WITH_ERRORS when the document cannot be indexed
    (``failure`` says why, as the dead-letter store would record it; the CLI exits 1)."""

    outcome: Outcome
    alias: str
    table: str
    id_columns: tuple[str, ...]
    #: the source's URL, password hidden
    source: str
    #: the pipeline's other aliases (``alias=`` picks one)
    other_aliases: tuple[str, ...]
    #: the document shown (None: the table is empty)
    doc_id: str | None
    #: the canonical JSON the reindex writes (None: the table is empty, or the row failed)
    canonical: str | None
    hash: str | None
    failure: str | None
    build: BuildPath
    #: the statements one keyset page of the reindex runs, values written in
    statements: tuple[str, ...]
    mapping: dict[str, Any]
    settings: dict[str, Any]
    partitions: PartitionPlan

    @property
    def document(self) -> Any:
        """The document as the index receives it (decoded from :attr:`canonical`)."""
        return None if self.canonical is None else orjson.loads(self.canonical)

    def to_dict(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "table": self.table,
            "id_columns": list(self.id_columns),
            "source": self.source,
            "other_aliases": list(self.other_aliases),
            "id": self.doc_id,
            "document": self.document,
            "canonical": self.canonical,
            "hash": self.hash,
            "failure": self.failure,
            "build": asdict(self.build),
            "statements": list(self.statements),
            "mapping": self.mapping,
            "settings": self.settings,
            "partitions": self.partitions.to_dict(),
        }


def explain_result(e: Explanation) -> ExplainResult:
    return ExplainResult(
        outcome=Outcome.DONE if e.failure is None else Outcome.DONE_WITH_ERRORS,
        alias=e.alias,
        table=e.table,
        id_columns=tuple(e.id_columns),
        source=e.source,
        other_aliases=tuple(e.other_aliases),
        doc_id=e.doc_id,
        canonical=None if e.canonical is None else e.canonical.decode("utf-8"),
        hash=e.hash,
        failure=e.failure,
        build=e.build,
        statements=tuple(e.statements),
        mapping=e.mapping,
        settings=e.settings,
        partitions=e.partitions,
    )


def explain(pipeline: PipelineArg, alias: str | None = None, *, doc_id: str | None = None) -> ExplainResult:
    """Explain index *alias* (the pipeline's first when None) with the document *doc_id* (the first
    by key when None; composite keys: parts joined by ``|``). An alias or id the source does not
    have raises :class:`~sparkindex.errors.UsageError`."""
    from sparkindex.jobs.explain import explain as explain_index

    return explain_result(explain_index(load(pipeline), alias, doc_id))

"""``api.explain``: one real document of an alias, its mapping, how it is built and the partition
plan (``sparkindex explain``), as a frozen result.

The work is :mod:`sparkindex.jobs.explain`'s (the reindex's own plan, builder and partition
calculator). It reads the source only and writes nothing, so it runs no preflight: it is what a
person runs while something is still wrong, and a refusal would hide the very document they came
to see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkindex.api.loading import PipelineArg, load
from sparkindex.api.results import Outcome

if TYPE_CHECKING:  # the CLI imports this package on every start; explaining imports them when it runs
    from sparkindex.jobs.explain import BuildPath, Explanation
    from sparkindex.jobs.explain_partitions import PartitionPlan
    from sparkindex.jobs.explain_shape import DocumentShape

__all__ = ["ExplainResult", "explain", "explain_result"]


@dataclass(frozen=True)
class ExplainResult:
    """``explain --json``: the job's :class:`~sparkindex.jobs.explain.Explanation`, whose
    ``to_dict()`` is the JSON and whose fields read through as typed properties
    (``result.alias``, ``result.document``, ``result.shape``, ``result.partitions``, ...; lists
    as tuples, and :attr:`canonical` as text).
    ``outcome`` is DONE_WITH_ERRORS when the document cannot be indexed (``failure`` says why, as
    the dead-letter store would record it; the CLI exits 1). A row a filter keeps out of the
    index is no error: ``filtered`` says which filter, and the document is None."""

    outcome: Outcome
    explanation: Explanation

    @property
    def canonical(self) -> str | None:
        """The canonical JSON the reindex writes, as text (None: the table is empty, the row
        failed or is filtered out)."""
        raw = self.explanation.canonical
        return None if raw is None else raw.decode("utf-8")

    def to_dict(self) -> dict[str, Any]:
        return self.explanation.to_dict()

    # -- the explanation's fields, read through (typed: the result is the API's contract) --------
    @property
    def alias(self) -> str:
        return self.explanation.alias

    @property
    def table(self) -> str:
        return self.explanation.table

    @property
    def id_columns(self) -> tuple[str, ...]:
        return tuple(self.explanation.id_columns)

    @property
    def source(self) -> str:
        """The source's URL, its secrets redacted."""
        return self.explanation.source

    @property
    def other_aliases(self) -> tuple[str, ...]:
        return tuple(self.explanation.other_aliases)

    @property
    def doc_id(self) -> str | None:
        return self.explanation.doc_id

    @property
    def document(self) -> Any:
        """The document as JSON values (None: no row, a failed one, or one a filter keeps out)."""
        return self.explanation.document

    @property
    def hash(self) -> str | None:
        return self.explanation.hash

    @property
    def failure(self) -> str | None:
        return self.explanation.failure

    @property
    def build(self) -> BuildPath:
        return self.explanation.build

    @property
    def statements(self) -> tuple[str, ...]:
        return tuple(self.explanation.statements)

    @property
    def mapping(self) -> dict[str, Any]:
        return self.explanation.mapping

    @property
    def settings(self) -> dict[str, Any]:
        return self.explanation.settings

    @property
    def partitions(self) -> PartitionPlan:
        return self.explanation.partitions

    @property
    def shape(self) -> DocumentShape:
        return self.explanation.shape

    @property
    def filtered(self) -> str | None:
        return self.explanation.filtered


def explain_result(e: Explanation) -> ExplainResult:
    return ExplainResult(Outcome.DONE if e.failure is None else Outcome.DONE_WITH_ERRORS, e)


def explain(pipeline: PipelineArg, alias: str | None = None, *, doc_id: str | None = None) -> ExplainResult:
    """Explain index *alias* (the pipeline's first when None) with the document *doc_id* (the first
    by key when None; composite keys: parts joined by ``|``). An alias or id the source does not
    have raises :class:`~sparkindex.errors.UsageError`; a row a filter leaves out is explained
    (``filtered``)."""
    from sparkindex.jobs.explain import explain as explain_index

    return explain_result(explain_index(load(pipeline), alias, doc_id))

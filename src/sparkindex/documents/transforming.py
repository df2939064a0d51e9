"""Running the index's transform (:mod:`.transform`) inside the builders, one page at a time.

Both builders hand their root documents here before encoding them, so the function sees the same
input whichever built them: JSON values (strings for dates and times, numbers for decimals), as
the index will hold them. NaN and infinities are refused before that JSON round trip, which would
turn them into ``null`` unseen; what the transform returns is walked whole, since it may add
fields of any shape where the plan's float paths know nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from sparkindex.documents.floats import FloatPaths, non_finite_anywhere, non_finite_path
from sparkindex.documents.hashing import dumps_document
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import DocumentError

if TYPE_CHECKING:
    from sparkindex.documents.transform import DocumentTransform, TransformCache
else:
    TransformCache = Any


def make_transform(plan: IndexPlan, cache: TransformCache | None = None) -> DocumentTransform | None:
    """The plan's transform, bound to its alias and *cache* (None without a transform). Its
    function is imported where it first runs: in the worker that builds the documents."""
    if plan.config.transform is None:
        return None
    from sparkindex.documents.transform import DocumentTransform

    return DocumentTransform(plan.config.transform, plan.alias, cache)


def transform_page(
    transform: DocumentTransform,
    floats: FloatPaths,
    ids: Sequence[str],
    docs: Sequence[dict[str, Any]],
    decoded: bool,
) -> list[dict[str, Any] | DocumentError]:
    """*docs* (root documents with these *ids*) after *transform*, in order; a document with a NaN
    or infinity (in a float column: *floats*) or whose transform failed is a DocumentError in its
    place. *decoded*: the documents were decoded from JSON already (the in-database builder)."""
    out: list[dict[str, Any] | DocumentError] = []
    todo: list[tuple[str, dict[str, Any]]] = []
    for doc_id, doc in zip(ids, docs, strict=True):
        bad = non_finite_path(doc, floats)
        if bad is not None:
            out.append(_non_finite(doc_id, bad))
            continue
        out.append(doc)
        todo.append((doc_id, doc if decoded else orjson.loads(dumps_document(doc))))
    done = iter(zip([doc_id for doc_id, _ in todo], transform.apply(todo), strict=True))
    return [doc if isinstance(doc, DocumentError) else _finite(*next(done)) for doc in out]


def _non_finite(doc_id: str, path: str) -> DocumentError:
    return DocumentError(doc_id, f"field {path!r} is NaN or infinite, which JSON cannot carry", "NonFinite")


def _finite(doc_id: str, result: dict[str, Any] | DocumentError) -> dict[str, Any] | DocumentError:
    """The transform's *result*, unless it holds a NaN or an infinity anywhere."""
    if isinstance(result, DocumentError):
        return result
    bad = non_finite_anywhere(result)
    return result if bad is None else _non_finite(doc_id, bad)


__all__ = ["TransformCache", "make_transform", "transform_page"]

"""What shapes a document beyond the bytes its rows give: the transform, the routing, the hash key.

A document's content hash covers its canonical bytes. Two things change what an index should hold
without changing those bytes: the transform's identity (a new ``version`` of the same function
must make every document stale, even where its output happens to be equal) and the routing
column (the same document on another shard). Both key the content hash (:func:`shape_key`), so
verify reports documents built under another shape as stale and repair rebuilds them. A plan
with neither hashes exactly as before, so existing indexes stay clean.
"""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, Any

import orjson

from sparkindex.documents.plan import IndexPlan

if TYPE_CHECKING:
    from sparkindex.documents.transform import DocumentTransform, TransformCache
else:
    TransformCache = Any


def transform_identity(plan: IndexPlan) -> str | None:
    """``module:function@version`` of the index's transform (None without one)."""
    transform = plan.config.transform
    return None if transform is None else f"{transform.function}@{transform.version}"


def shape_key(plan: IndexPlan) -> bytes:
    """The key of the plan's content hashes: empty (an unkeyed hash, as before) unless the index
    has a transform or a routing column."""
    identity = transform_identity(plan)
    if identity is None and plan.routing is None:
        return b""
    described = orjson.dumps({"routing": plan.routing, "transform": identity}, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(described, digest_size=32).digest()


def make_transform(plan: IndexPlan, cache: TransformCache | None = None) -> DocumentTransform | None:
    """The plan's transform, bound to its alias and *cache* (None without a transform). Its
    function is imported where it first runs: in the worker that builds the documents."""
    if plan.config.transform is None:
        return None
    from sparkindex.documents.transform import DocumentTransform

    return DocumentTransform(plan.config.transform, plan.alias, cache)


def non_finite_anywhere(value: Any, path: str = "") -> str | None:
    """The dotted path of the first NaN or infinite float anywhere in *value* (a transform may
    add fields of any shape, where the plan's float paths know nothing), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path or "(document)"
    if isinstance(value, dict):
        for name, item in value.items():
            found = non_finite_anywhere(item, f"{path}.{name}" if path else str(name))
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = non_finite_anywhere(item, path)
            if found is not None:
                return found
    return None


__all__ = ["TransformCache", "make_transform", "non_finite_anywhere", "shape_key", "transform_identity"]

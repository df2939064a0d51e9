"""Canonical JSON and the content hash every document carries.

The hash is taken over the canonical (sorted-key) JSON of the document as built from the source,
so verify and change detection compare source and index without fetching whole documents.

Two things change what an index should hold without changing those bytes: the transform's
identity (a new ``version`` of the same function must make every document stale, even where its
output happens to be equal) and the routing column (the same document on another shard). Both
key the hash (:func:`shape_key`), so verify reports documents built under another shape as stale
and repair rebuilds them. A plan with neither hashes exactly as before: existing indexes stay
clean.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from sparkindex.documents.plan import IndexPlan
from sparkindex.encoding import dumps_json


def dumps_document(doc: dict[str, Any]) -> bytes:
    return dumps_json(doc, orjson.OPT_SORT_KEYS)


def content_hash(canonical: bytes, key: bytes = b"") -> str:
    """The hash of *canonical*; *key* (see :func:`shape_key`) keys it
    with what shapes the document beyond its bytes (empty: the plain hash)."""
    return hashlib.blake2b(canonical, digest_size=16, key=key).hexdigest()


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

"""Canonical JSON and the content hash every document carries.

The hash is taken over the canonical (sorted-key) JSON of the document as built from the source,
so verify and change detection compare source and index without fetching whole documents.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from sparkindex.encoding import dumps_json


def dumps_document(doc: dict[str, Any]) -> bytes:
    return dumps_json(doc, orjson.OPT_SORT_KEYS)


def content_hash(canonical: bytes, key: bytes = b"") -> str:
    """The hash of *canonical*; *key* (see :func:`sparkindex.documents.shaping.shape_key`) keys it
    with what shapes the document beyond its bytes (empty: the plain hash)."""
    return hashlib.blake2b(canonical, digest_size=16, key=key).hexdigest()

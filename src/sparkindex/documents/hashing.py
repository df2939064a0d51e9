"""Canonical JSON and the content hash every document carries.

The hash is taken over the canonical (sorted-key) JSON of the document as built from the source,
so verify and change detection compare source and index without fetching whole documents.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from sparkindex.encoding import json_default


def dumps_document(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, default=json_default, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def content_hash(canonical: bytes) -> str:
    return hashlib.blake2b(canonical, digest_size=16).hexdigest()

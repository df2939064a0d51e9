"""Toy per-document transforms for tests (``transform: tests.support.toy_embedding:embed``).

``embed`` stands in for an expensive embedding: 8 floats from the words of the shop product's
``name`` and ``description``, deterministic across processes (a hash, not Python's salted
``hash``). It counts its calls in a file, not a variable: Spark's Python workers are other
processes, so only what they write down can be counted by the test. Each call appends one short
line (the document's ``id``) with ``O_APPEND``, which the kernel keeps whole between writers.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path
from typing import Any

#: the file each call of :func:`embed` appends a line to, when set
LOG_ENV = "SPARKINDEX_TOY_EMBED_LOG"
DIMENSIONS = 8
WORD = re.compile(r"\w+")


def vector(text: str) -> list[float]:
    """*text*'s words, each hashed to 8 signed bytes, summed and normalised to length 1 (all
    zeros for text without words)."""
    sums = [0.0] * DIMENSIONS
    for word in WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=DIMENSIONS).digest()
        for i, byte in enumerate(digest):
            sums[i] += byte / 127.5 - 1.0
    norm = math.sqrt(sum(x * x for x in sums))
    return [round(x / norm, 6) for x in sums] if norm else sums


def log_call(key: object) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key}\n".encode())
    finally:
        os.close(fd)


def logged_calls(path: Path) -> list[str]:
    """The keys :func:`embed` logged to *path*, one per call, in order (none if never called)."""
    return path.read_text().splitlines() if path.exists() else []


def embed(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with ``embedding``: the toy vector of its name (or title) and description."""
    log_call(doc.get("id"))
    title = doc.get("name", doc.get("title")) or ""
    text = f"{title} {doc.get('description') or ''}"
    return {**doc, "embedding": vector(text)}


def raising(doc: dict[str, Any]) -> dict[str, Any]:
    """Fails for the documents whose ``id`` is a multiple of 7; the others pass unchanged."""
    key = doc.get("id")
    if isinstance(key, int) and key % 7 == 0:
        raise ValueError(f"bad row {key}")
    return doc


def versioned(doc: dict[str, Any]) -> dict[str, Any]:
    """Adds one field, ``toy_version``: a cheap transform whose identity tests can bump."""
    return {**doc, "toy_version": 1}


def not_a_dict(doc: dict[str, Any]) -> list[Any]:
    """Returns the document's items instead of a document: what the transform must refuse."""
    return list(doc.items())


#: not a function: what ``check`` must refuse
NOT_CALLABLE = 42

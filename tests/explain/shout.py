"""A per-document transform for the explain tests (``transform: tests.explain.shout:shout``)."""

from __future__ import annotations

from typing import Any


def shout(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with ``loud``: its title in capitals."""
    return {**doc, "loud": str(doc.get("title", "")).upper()}

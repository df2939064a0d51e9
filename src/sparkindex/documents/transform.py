"""Per-document transforms: a user's Python function run on each built document before it is
indexed (``indexes[].transform: package.module:function``).

The function takes the built document (a dict of JSON-able values) and returns the document to
index. It runs where documents are built (Spark's Python workers), so it is imported lazily, by
:mod:`importlib`, in the process that calls it; the driver imports it once at plan time
(:meth:`DocumentTransform.check`) so that a missing module fails the run before any work starts.

Its identity, ``module:function@version``, is part of every document's content hash: bumping
``version`` makes verify report every document stale and repair rebuild them.

One document's failure is that document's alone: an exception becomes a
:class:`~sparkindex.errors.DocumentError` (class ``TransformError``, the exception's last
traceback line as the reason), and so does a result that is not a dict; the other documents of
the page go on. A :class:`~sparkindex.errors.TransientError` the function raises (an embedding
service that is down) is not the document's fault: it propagates, and the page is retried
(under ``on_change``, what the page computed before it is cached first, so the retry does not
compute it again).

``on_change`` (expensive transforms, such as embeddings) names the document fields the
transform's output depends on. The transform then runs only for documents whose values of those
fields (or whose transform identity) changed since the last run. What it did then is kept in the
coordination store's transform cache as a diff, the fields it set (with their values) and the
fields it removed, and is applied to the freshly built document instead of calling the function.

**The contract of on_change**: the fields a transform sets or removes must depend only on the
``on_change`` fields (and on the transform's code, which ``version`` stands for). A field the
transform copies from elsewhere in the document would be served stale from the cache when only
that other field changed; list it in ``on_change`` too, or bump ``version`` when the code changes.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import orjson

from sparkindex.config.indexes import TransformConfig
from sparkindex.documents.hashing import dumps_document
from sparkindex.errors import ConfigError, DocumentError, TransientError

log = logging.getLogger(__name__)

#: the error class dead letters of a failing transform carry
ERROR_CLASS = "TransformError"

Transform = Callable[[dict[str, Any]], Any]


class TransformCache(Protocol):
    """Where the outputs of an ``on_change`` transform are kept between runs; the coordination
    store's ``store.transform_cache`` is one. Entries are ``(doc_id, input_hash, diff)``."""

    def lookup(self, alias: str, doc_ids: Sequence[str]) -> dict[str, tuple[str, bytes]]: ...

    def put(self, alias: str, entries: Sequence[tuple[str, str, bytes]]) -> None: ...


class DocumentTransform:
    """One index's transform, for one process: it imports the function on first use, counts the
    calls it makes (``calls``) and the documents the cache served instead (``hits``)."""

    def __init__(
        self, config: TransformConfig, alias: str, cache: TransformCache | None = None, *, where: str | None = None
    ) -> None:
        self.config = config
        self.alias = alias
        self.cache = cache
        self.where = where or f"indexes[{alias}]"
        module, _, name = config.function.partition(":")
        self.module, self.name = module, name
        self.identity = f"{module}:{name}@{config.version}"
        self.on_change = tuple(config.on_change) if config.on_change else None
        self.calls = 0
        self.hits = 0
        self._fn: Transform | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (shipped to a Spark worker) without the function: the worker imports it."""
        state = dict(self.__dict__)
        state["_fn"] = None
        return state

    def check(self, where: str) -> None:
        """Import the function now (the driver, at plan time); a :class:`ConfigError` naming
        ``<where>.transform.function`` if it cannot be."""
        self.where = where
        self._function()

    def _function(self) -> Transform:
        if self._fn is not None:
            return self._fn
        key = f"{self.where}.transform.function"
        try:
            fn: Transform = getattr(importlib.import_module(self.module), self.name)
        except Exception as exc:  # noqa: BLE001 - a module failing at import is as unusable as a missing one
            raise ConfigError(f"{key}: cannot import {self.config.function!r}: {describe(exc)}") from None
        if not callable(fn):
            raise ConfigError(f"{key}: {self.config.function!r} is a {type(fn).__name__}, not a function")
        self._fn = fn
        return fn

    def apply(self, docs: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any] | DocumentError]:
        """The documents of one page, ``(doc_id, document)`` each, transformed, in order: each one
        the document to index or the :class:`DocumentError` it ended in. With ``on_change`` and a
        cache: one lookup for the page's ids, the function called only for the documents whose
        inputs changed, and one put of what those calls produced; that put happens too when the
        page stops on an error (a :class:`TransientError`), so its retry calls the function only
        for the documents not reached."""
        fn = self._function()
        if self.on_change is None or self.cache is None:  # without a cache: nothing to skip, nor to keep
            return [self._call(fn, doc_id, doc) for doc_id, doc in docs]
        cached = self.cache.lookup(self.alias, [doc_id for doc_id, _ in docs]) if docs else {}
        out: list[dict[str, Any] | DocumentError] = []
        fresh: dict[str, tuple[str, str, bytes]] = {}
        try:
            for doc_id, doc in docs:
                key = self.input_hash(doc)
                entry = cached.get(doc_id)
                if entry is not None and entry[0] == key:
                    applied = apply_diff(doc, entry[1])
                    if applied is not None:
                        self.hits += 1
                        out.append(applied)
                        continue
                # the function gets a copy: one that changes its argument in place would otherwise
                # change the document the diff is taken against
                result = self._call(fn, doc_id, copy.deepcopy(doc))
                if isinstance(result, dict):
                    try:
                        fresh[doc_id] = (doc_id, key, make_diff(doc, result))
                    except (TypeError, ValueError) as exc:  # a value JSON has no type for, or no equality
                        result = DocumentError(doc_id, f"the transform's result cannot be encoded: {exc}", ERROR_CLASS)
                out.append(result)
        except Exception:
            # a TransientError mid-page (the embedding service went down): the page is retried, and
            # what was computed before it is kept so the retry does not pay for it again. Best
            # effort: a failing put must not hide the error that stopped the page.
            if fresh:
                try:
                    self.cache.put(self.alias, list(fresh.values()))
                except Exception:  # noqa: BLE001 - advisory: the retry recomputes what was not kept
                    log.warning("%s: could not keep %d transform outputs of a failed page", self.where, len(fresh))
            raise
        if fresh:
            self.cache.put(self.alias, list(fresh.values()))
        return out

    def input_hash(self, doc: dict[str, Any]) -> str:
        """What the transform's output depends on under ``on_change``: the values of those fields
        (canonical JSON) and the transform's identity, hashed."""
        fields = {field: doc.get(field) for field in self.on_change or ()}
        h = hashlib.blake2b(dumps_document(fields), digest_size=16)
        h.update(b"\0" + self.identity.encode())
        return h.hexdigest()

    def _call(self, fn: Transform, doc_id: str, doc: dict[str, Any]) -> dict[str, Any] | DocumentError:
        self.calls += 1
        try:
            result = fn(doc)
        except TransientError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's code: any failure is this document's
            return DocumentError(doc_id, describe(exc), ERROR_CLASS)
        if not isinstance(result, dict):
            shown = repr(result)
            shown = shown if len(shown) <= 200 else shown[:200] + "..."
            return DocumentError(
                doc_id, f"the transform returned a {type(result).__name__}, not a dict: {shown}", ERROR_CLASS
            )
        return result


def describe(exc: BaseException) -> str:
    """The last line of the exception's traceback, as Python prints it (``ValueError: bad row``,
    ``mypkg.errors.Refused: ...``), without its notes."""
    cls = type(exc)
    name = cls.__qualname__
    if cls.__module__ not in ("builtins", "__main__"):
        name = f"{cls.__module__}.{name}"
    text = str(exc)
    return f"{name}: {text}" if text else name


def make_diff(before: dict[str, Any], after: dict[str, Any]) -> bytes:
    """What turned *before* into *after*, as canonical JSON: ``set``, the fields added or changed
    with their new values, and ``unset``, the names of the fields removed."""
    changed = {k: v for k, v in after.items() if k not in before or before[k] != v}
    removed = sorted(k for k in before if k not in after)
    return dumps_document({"set": changed, "unset": removed})


def apply_diff(doc: dict[str, Any], diff: bytes) -> dict[str, Any] | None:
    """*doc* with *diff* applied (a new dict; *doc* is left as it was); None for an entry that is
    not a diff (written by something else, or cut short): the caller then calls the transform."""
    try:
        parsed = orjson.loads(diff)
    except orjson.JSONDecodeError:
        return None
    if (
        not isinstance(parsed, dict)
        or not isinstance(parsed.get("set"), dict)
        or not isinstance(parsed.get("unset"), list)
    ):
        return None
    out = dict(doc)
    out.update(parsed["set"])
    for name in parsed["unset"]:
        out.pop(name, None)
    return out

"""``_bulk`` bodies and their answers, without the clients' bulk helpers.

Why not ``helpers.bulk``/``streaming_bulk``: they serialise every action through the client's
serializer (the document would be decoded and encoded again), retry only per-item 429s and only
with ``raise_on_error=False``, and report failures as a list to be matched back by hand. The worker
already retries just the failed subset with capped backoff and jitter
(:func:`sparkindex.worker.bulk.bulk_with_retries`); what it needs from a backend is one classified
result per item, in order. So this module builds NDJSON from the canonical bytes the builder
made, sends it in requests of bounded size, and classifies each answer item.

The sortable key and the content hash are spliced into the body as bytes: the canonical JSON is
an object, so ``{"_hash":…,"_key":…,`` replaces its opening brace. On a 2.2 KB nested document
that takes 1.1 us against 7.9 us to decode, add two fields and encode again (orjson, this machine).

The halves of the document's range check (``_check_hi``, ``_check_lo``; :mod:`sparkindex.checksums`)
are spliced in the same way, but only into an index whose mapping declares them: indexes are
``dynamic: strict``, so one created by an older sparkindex would refuse every document carrying
them. The target knows which indexes do (:meth:`SearchEngineTarget.bulk`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from sparkindex.checksums import CHECK_FIELDS, check_halves
from sparkindex.errors import PermanentError
from sparkindex.targets.base import BulkItem, BulkItemResult
from sparkindex.targets.search_engine.api import EngineApi
from sparkindex.targets.search_engine.config import SearchEngineConfig
from sparkindex.targets.search_engine.errors import (
    HttpFailure,
    describe_error,
    failure_from_body,
    is_transient_status,
    request_error,
)
from sparkindex.targets.write_deadline import write_budget_s

#: A bulk answer with only what :func:`item_result` reads: an engine's item answer is some 200
#: bytes (index, id, version, shards, sequence numbers) against some 25, on every document sent.
#: es-hadoop asks for the same. A server that ignores the filter answers in full, which works too.
BULK_ANSWER = {"filter_path": "errors,items.*.status,items.*.error"}


@dataclass(frozen=True, slots=True)
class EncodedItem:
    """One item's NDJSON lines (action, and the body for an index), ready to join."""

    lines: bytes
    error: str | None = None  # the item cannot be sent at all (no body)


#: What the engines accept; outside it they fail the whole request (a validation error), so such
#: an item is refused here, alone.
MAX_ID_BYTES = 512
MAX_VERSION = 2**63 - 1


def encode_item(item: BulkItem, checks: bool = False) -> EncodedItem:
    """*item* as NDJSON lines; with *checks* (the index declares the check fields) its check too."""
    if len(item.id.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        return EncodedItem(b"", error=f"document id is longer than {MAX_ID_BYTES} bytes (the engine's limit)")
    if item.version is not None and not 0 <= item.version <= MAX_VERSION:
        return EncodedItem(b"", error=f"external version {item.version} is outside 0..2^63-1")
    meta: dict[str, Any] = {"_id": item.id}
    if item.version is not None:
        meta["version"] = item.version
        meta["version_type"] = "external_gte"
    if item.routing is not None:
        meta["routing"] = item.routing
    action = orjson.dumps({item.op: meta})
    if item.op == "delete":
        return EncodedItem(action + b"\n")
    if item.source is None:
        return EncodedItem(b"", error="no document body to index")
    body = with_key_and_hash(item.source, item.sort_key, item.hash, item.check if checks else None)
    return EncodedItem(action + b"\n" + body + b"\n")


def with_key_and_hash(source: bytes, sort_key: str | None, doc_hash: str | None, check: int | None = None) -> bytes:
    """*source* (a JSON object's bytes) with ``_hash`` and ``_key`` added in front, and the
    halves of *check* when given (see module doc)."""
    extra = b""
    if check is not None:
        hi, lo = check_halves(check)
        extra += b'"%s":%d,"%s":%d,' % (CHECK_FIELDS[0].encode(), hi, CHECK_FIELDS[1].encode(), lo)
    if doc_hash is not None:
        extra += b'"_hash":' + _json_text(doc_hash) + b","
    if sort_key is not None:
        extra += b'"_key":' + _json_text(sort_key) + b","
    if not extra:
        return source
    body = source.lstrip()
    if not body.startswith(b"{"):
        return source  # not an object: the engine rejects it, and says why, per item
    rest = body[1:].lstrip()
    if rest.startswith(b"}"):
        return b"{" + extra[:-1] + rest
    return b"{" + extra + rest


def _json_text(text: str) -> bytes:
    """*text* as a JSON string: hashes and sort keys are hex, which needs no escaping (a third of
    the splice's time went to orjson for them)."""
    if text.isascii() and text.isalnum():
        return b'"' + text.encode("ascii") + b'"'
    return orjson.dumps(text)


def chunks(encoded: Sequence[EncodedItem], max_docs: int, max_bytes: int) -> Iterator[tuple[int, int]]:
    """[start, end) positions of consecutive items forming requests of at most *max_docs* items
    and about *max_bytes* (an item larger than that travels alone)."""
    start, size = 0, 0
    for i, enc in enumerate(encoded):
        n = len(enc.lines)
        if i > start and (i - start >= max_docs or size + n > max_bytes):
            yield start, i
            start, size = i, 0
        size += n
    if start < len(encoded):
        yield start, len(encoded)


def refused_checks(result: BulkItemResult) -> bool:
    """Whether the engine refused an item for its check fields: the index behind the name written
    to does not declare them (an alias moved to an index created by an older sparkindex)."""
    return (
        not result.ok
        and result.error_class == "strict_dynamic_mapping_exception"
        and any(f"[{name}]" in (result.error or "") for name in CHECK_FIELDS)
    )


def item_result(item: BulkItem, answer: dict[str, Any]) -> BulkItemResult:
    """Classify one answer item of a ``_bulk`` response (``{"index": {...}}``)."""
    body = next(iter(answer.values())) if answer else {}
    status = int(body.get("status", 0))
    if 200 <= status < 300:
        return BulkItemResult(item.id, True)
    error = body.get("error")
    if status == 404 and item.op == "delete" and error is None:
        return BulkItemResult(item.id, True)  # already gone (an external-version delete leaves a tombstone)
    error_type, reason = describe_error(error)
    if status == 409 and item.version is not None and error_type == "version_conflict_engine_exception":
        # external_gte: the index holds a newer version of this document; the write is obsolete
        return BulkItemResult(item.id, True, obsolete=True)
    return BulkItemResult(
        item.id, False, f"{status} {error_type}: {reason}", error_type, transient=is_transient_status(status)
    )


def write_bulk(
    api: EngineApi, config: SearchEngineConfig, index: str, items: Sequence[BulkItem], checks: bool
) -> list[BulkItemResult]:
    """Write *items* to *index* in requests of ``max_bulk_docs``/``max_bulk_bytes``: one result
    per item, in order. With *checks*, the items' checks are written too (see module doc)."""
    encoded = [encode_item(item, checks) for item in items]
    results: list[BulkItemResult | None] = [None] * len(items)
    sendable = []
    for i, enc in enumerate(encoded):
        if enc.error is not None:
            results[i] = BulkItemResult(items[i].id, False, enc.error, "DocumentError")
        else:
            sendable.append(i)
    todo = [encoded[i] for i in sendable]
    for start, end in chunks(todo, config.max_bulk_docs, config.max_bulk_bytes):
        positions = sendable[start:end]
        sent = _send(api, config, index, [items[p] for p in positions], todo[start:end])
        for pos, res in zip(positions, sent, strict=True):
            results[pos] = res
    return [r for r in results if r is not None]


def _send(
    api: EngineApi, config: SearchEngineConfig, index: str, items: list[BulkItem], encoded: list[EncodedItem]
) -> list[BulkItemResult]:
    body = b"".join(e.lines for e in encoded)
    # under a writer's deadline (a partition's lease): checked before each chunk, and the
    # request neither waits past it nor is resent by the client
    budget = write_budget_s(f"bulk of {len(items)} to {index!r}")
    timeout = None if budget is None else min(budget, config.request_timeout_s)
    try:
        answer = api.raw(
            "POST",
            f"/{quote(index)}/_bulk",
            params=BULK_ANSWER,
            ndjson_body=body,
            timeout_s=timeout,
            single_try=budget is not None,
        )
    except HttpFailure as failure:
        if failure.status == 413:  # too large for the server: halve, down to one document
            if len(items) == 1:
                return [BulkItemResult(items[0].id, False, f"413 {failure.reason}", "request_entity_too_large")]
            half = len(items) // 2
            return _send(api, config, index, items[:half], encoded[:half]) + _send(
                api, config, index, items[half:], encoded[half:]
            )
        raise request_error(failure, f"bulk of {len(items)} to {index!r}", api.where) from None
    answers = answer.get("items") if isinstance(answer, dict) else None
    if not isinstance(answers, list) or len(answers) != len(items):
        if isinstance(answer, dict) and "error" in answer:
            raise request_error(failure_from_body(int(answer.get("status", 500)), answer), "bulk", api.where)
        got = len(answers) if isinstance(answers, list) else "no"
        raise PermanentError(f"bulk to {index!r}: {got} answers for {len(items)} items from {api.where}")
    if answer.get("errors") is False:  # every item 2xx (or an absent delete): nothing to classify
        return [BulkItemResult(item.id, True) for item in items]
    return [item_result(item, a) for item, a in zip(items, answers, strict=True)]

"""The alias swap as a compare-and-swap, and fencing tokens kept in the cluster itself.

The swap is one ``POST _aliases``: ``remove`` of every index the alias held when this driver
looked (each with ``must_exist``, so if the alias moved meanwhile the whole request fails and
nothing changes) plus ``add`` of the new index as the write index. The engines apply the
actions atomically, so readers see the old index or the new one, never both or neither.

``must_exist`` needs Elasticsearch 7.10+ or OpenSearch 2.12+; older OpenSearch refuses the
field and silently skips a ``remove`` of an alias that is not there. There the request relies on
the engines' rule that an alias has one write index: if another job moved the alias to its own
version (always added as the write index), adding ours as the write index fails the whole
request. An alias moved by hand without a write index is caught by reading the alias back and
undoing our ``add``, which leaves a window of one request in which readers see both indexes.

Adopting an index that bears the alias's name (``reindex --adopt``): ``remove_index`` of it and
``add`` of the alias in the same request, which the engines apply atomically (the removal first).

Fences: the newest fencing token per alias is one document in a small hidden index, written with
``version_type=external_gte`` and the token as its version. The engine keeps the maximum for us:
an older token is refused with a 409 (a version conflict), atomically, whatever the order of
concurrent writers. A swap first records its own token the same way, so a holder whose token
is older than one already observed is refused before it touches the alias. (The token check and
the alias request are two requests; a newer holder that takes the lock between them reads the
alias only after recording its token, and its own compare-and-swap then sees where this swap
left the alias, so nothing is lost either way.)
"""

from __future__ import annotations

from urllib.parse import quote

from sparkindex.errors import LockLost, PermanentError
from sparkindex.targets.search_engine.api import EngineApi
from sparkindex.targets.search_engine.errors import HttpFailure, request_error

FENCE_INDEX_BODY = {
    "settings": {"index": {"hidden": True, "number_of_shards": 1, "auto_expand_replicas": "0-1"}},
    "mappings": {"dynamic": "strict", "properties": {"alias": {"type": "keyword"}, "fence": {"type": "long"}}},
}


def alias_indexes(api: EngineApi, alias: str) -> dict[str, bool]:
    """Index -> is-write-index for every index *alias* points at ({} if it points nowhere)."""
    # a wildcard: no alias is an empty answer, not a 404 the clients would log as a failure
    found = api.call("GET", f"/_alias/{quote(alias)}*", f"reading alias {alias!r}")
    out: dict[str, bool] = {}
    for index, entry in (found or {}).items():
        spec = (entry.get("aliases") or {}).get(alias)
        if spec is not None:
            out[index] = bool(spec.get("is_write_index", False))
    return out


def current_index(api: EngineApi, alias: str) -> str | None:
    """The index behind *alias*: its only one, or its write index when it spans several."""
    found = alias_indexes(api, alias)
    if not found:
        return None
    if len(found) == 1:
        return next(iter(found))
    writers = [i for i, w in found.items() if w]
    if len(writers) == 1:
        return writers[0]
    raise PermanentError(f"alias {alias!r} points at several indexes ({', '.join(sorted(found))}) and none writes")


def observe_fence(api: EngineApi, fence_index: str, alias: str, fence: int) -> bool:
    """Record *fence* for *alias* unless a newer one is recorded; True if *fence* is the newest."""
    _create_fence_index(api, fence_index)  # explicitly: an auto-created one would be neither strict nor hidden
    path = f"/{quote(fence_index)}/_doc/{quote(alias, safe='')}"
    params = {"version": str(fence), "version_type": "external_gte", "refresh": "false"}
    try:
        api.raw("PUT", path, {"alias": alias, "fence": fence}, params=params)
        return True
    except HttpFailure as failure:
        if failure.status == 409:
            return False
        raise request_error(failure, f"recording fencing token {fence} of alias {alias!r}", api.where) from None


def _create_fence_index(api: EngineApi, fence_index: str) -> None:
    # looked up by wildcard first: a failed create would be logged by the clients as a failure
    found = api.call(
        "GET",
        f"/{quote(fence_index)}*/_settings/index.provided_name",
        f"looking up the fence index {fence_index!r}",
        params={"expand_wildcards": "all"},
    )
    if fence_index in (found or {}):
        return
    try:
        api.raw("PUT", f"/{quote(fence_index)}", FENCE_INDEX_BODY)
    except HttpFailure as failure:
        if failure.error_type != "resource_already_exists_exception":
            raise request_error(failure, f"creating the fence index {fence_index!r}", api.where) from None


def _moved(failure: HttpFailure) -> bool:
    """Whether a failed swap means the alias (or the adopted index) changed under us."""
    if failure.status == 404 and failure.error_type in ("aliases_not_found_exception", "index_not_found_exception"):
        return True
    return failure.error_type == "illegal_state_exception" and "more than one write index" in failure.reason


def swap(api: EngineApi, fence_index: str, alias: str, new_index: str, expected: str | None, fence: int | None) -> None:
    if fence is not None and not observe_fence(api, fence_index, alias, fence):
        raise LockLost(f"alias {alias!r}: fencing token {fence} is older than one recorded since; not swapping")
    before = alias_indexes(api, alias)
    adopting = expected == alias
    if adopting:
        if before:
            raise LockLost(f"alias {alias!r} exists already (on {', '.join(sorted(before))}); nothing to adopt")
        actions: list[dict[str, dict[str, object]]] = [{"remove_index": {"index": alias}}]
    elif (expected is None and before) or (expected is not None and expected not in before):
        now = ", ".join(sorted(before)) or "nothing"
        raise LockLost(f"alias {alias!r} points at {now}, not at {expected or 'nothing'} as expected; not swapping")
    else:
        strict = {"must_exist": True} if api.engine.alias_must_exist else {}
        actions = [
            {"remove": {"index": index, "alias": alias, **strict}} for index in sorted(before) if index != new_index
        ]
    actions.append({"add": {"index": new_index, "alias": alias, "is_write_index": True}})
    try:
        api.raw("POST", "/_aliases", {"actions": actions})
    except HttpFailure as failure:
        if _moved(failure):
            raise LockLost(f"alias {alias!r} moved while swapping to {new_index!r}: {failure.reason}") from None
        raise request_error(failure, f"swapping alias {alias!r} to {new_index!r}", api.where) from None
    if expected is None or not api.engine.alias_must_exist:
        # No request can say "add only if the alias does not exist" (nor, without must_exist,
        # "remove only if it is there"): check, and undo a race.
        after = alias_indexes(api, alias)
        if set(after) != {new_index}:
            # one request: our add out, and back in whatever our removes took out
            undo: list[dict[str, dict[str, object]]] = [{"remove": {"index": new_index, "alias": alias}}]
            undo += [
                {"add": {"index": index, "alias": alias, "is_write_index": writes}}
                for index, writes in sorted(before.items())
                if index not in after and index != new_index
            ]
            api.call("POST", "/_aliases", f"undoing the swap of alias {alias!r}", {"actions": undo})
            others = ", ".join(sorted(set(after) - {new_index}))
            raise LockLost(f"alias {alias!r} changed meanwhile (now also on {others}); not swapping")

"""A null bulk endpoint: an OpenSearch-shaped HTTP server that acknowledges writes and stores nothing.

Why: the reindex figure against a real search engine measures the engine as much as the pipeline,
and the only OpenSearch available here (``osmem-server``, a test double) indexes 2 KB documents
at about 220 docs/s. With this server behind ``opensearch://host:port`` the figure is the
pipeline's own cost: reading, building, encoding, sending, cursors. It answers what the
``opensearch`` target calls: the info document (as OpenSearch 2.x), index create / exists /
delete / get / settings / mapping (``_meta`` included), ``_aliases`` (kept in memory, applied
atomically, ``must_exist`` honoured so a compare-and-swap can be refused), ``_bulk`` answered
item by item, ``_count``, ``_refresh``, ``_flush``, ``_forcemerge``, ``_cluster/health`` and an
empty ``_search``. Anything else gets a 404 and a line on stderr, so a run shows what is missing.

It must never be the bottleneck, hence a raw asyncio HTTP/1.1 protocol with keep-alive in its own
process (one event loop, so every request, the alias swap included, is atomic by construction):
a ``_bulk`` body is scanned, not decoded; only the small action lines are parsed, the document
lines are skipped by searching for their newline. ``GET /_null/stats`` reports the counters and
the server's own CPU seconds, so a benchmark can show how little of the run the server used.

What it cannot do, by design: ``_count`` counts acknowledged index operations per index minus
deletes, not distinct ids (a redone batch counts twice; a benchmark without crashes redoes
nothing), and searches, scans and point-in-time reads find nothing.

    python -m bench.null_endpoint --port 9200 [--host 127.0.0.1] [--parent-pid PID]

On start it prints one JSON line (``{"listening": "host:port", "pid": ...}``) once the socket is
bound, so a caller waits for that line rather than sleeping.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fnmatch
import os
import signal
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qsl, unquote

import orjson

ROOT = Path(__file__).resolve().parents[1]
VERSION = "2.17.0"
MAX_HEAD = 64 * 1024
INBUF = 256 * 1024
REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length"}


class HttpError(Exception):
    """An OpenSearch-style error answer: ``{"error": {"type", "reason"}, "status"}``."""

    def __init__(self, status: int, kind: str, reason: str, index: str | None = None) -> None:
        super().__init__(reason)
        self.status, self.kind, self.reason, self.index = status, kind, reason, index

    def body(self) -> dict[str, Any]:
        cause: dict[str, Any] = {"type": self.kind, "reason": self.reason}
        if self.index is not None:
            cause["index"] = self.index
        return {"error": {"root_cause": [cause], **cause}, "status": self.status}


@dataclass
class Index:
    settings: dict[str, Any]
    mappings: dict[str, Any]
    aliases: dict[str, dict[str, Any]] = field(default_factory=dict)  # alias -> its properties
    docs: int = 0  # acknowledged index operations minus deletes (nothing is stored)
    versions: dict[str, int] = field(default_factory=dict)  # documents written one by one (_doc)
    created: int = field(default_factory=lambda: int(time.time() * 1000))


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _flat_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as OpenSearch returns them: nested, under ``index``, values as strings."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        node = out
        parts = key.split(".")
        if parts[0] != "index":
            parts = ["index", *parts]
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if isinstance(value, dict):
            for sub_key, sub in _flat_settings(value).get("index", {}).items():
                node.setdefault(parts[-1], {})[sub_key] = sub
        else:
            node[parts[-1]] = value if isinstance(value, str | list) else orjson.dumps(value).decode()
    return out


def _filtered(settings: dict[str, Any], names: str) -> dict[str, Any]:
    """*settings* (nested) reduced to the dotted names (wildcards allowed) of a comma-separated list."""
    flat: dict[str, Any] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    walk(settings, "")
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if any(fnmatch.fnmatchcase(key, pattern) for pattern in names.split(",")):
            node = out
            *parents, last = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
    return out


def _index_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings given as ``{"index": {...}}``, ``{"index.x": ...}`` or bare, without the ``index`` level."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key == "index" and isinstance(value, dict):
            _merge(out, value)
        else:
            out[key.removeprefix("index.")] = value
    return out


class State:
    """Indexes, aliases and counters: everything the server keeps, all in memory."""

    def __init__(self) -> None:
        self.indexes: dict[str, Index] = {}
        self.seq = 0
        self.stats: dict[str, Any] = {
            "requests": 0,
            "bulk_requests": 0,
            "bulk_items": 0,
            "bulk_bytes": 0,
            "unknown": {},
        }

    # -- names -------------------------------------------------------------------------------
    def aliases(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, idx in self.indexes.items():
            for alias in idx.aliases:
                out.setdefault(alias, []).append(name)
        return out

    def resolve(self, expr: str, missing_ok: bool = False) -> list[str]:
        """Index names for a comma-separated expression of names, aliases and wildcards."""
        if expr in ("", "_all", "*"):
            return sorted(self.indexes)
        aliases = self.aliases()
        out: list[str] = []
        for part in expr.split(","):
            if any(c in part for c in "*?"):
                out += [n for n in sorted(self.indexes) if fnmatch.fnmatchcase(n, part)]
                for alias in sorted(aliases):
                    if fnmatch.fnmatchcase(alias, part):
                        out += aliases[alias]
            elif part in self.indexes:
                out.append(part)
            elif part in aliases:
                out += aliases[part]
            elif not missing_ok:
                raise HttpError(404, "index_not_found_exception", f"no such index [{part}]", part)
        return list(dict.fromkeys(out))

    def write_index(self, name: str) -> str:
        """The index a write to *name* lands in: itself, or the alias's (write) index."""
        if name in self.indexes:
            return name
        targets = self.aliases().get(name)
        if targets is None:  # OpenSearch creates an index on first write
            self.indexes[name] = Index({}, {})
            return name
        if len(targets) == 1:
            return targets[0]
        writers = [t for t in targets if self.indexes[t].aliases[name].get("is_write_index")]
        if len(writers) != 1:
            raise HttpError(400, "illegal_argument_exception", f"no write index is defined for alias [{name}]")
        return writers[0]

    def one(self, name: str) -> Index:
        idx = self.indexes.get(name)
        if idx is None:
            raise HttpError(404, "index_not_found_exception", f"no such index [{name}]", name)
        return idx

    # -- aliases -----------------------------------------------------------------------------
    def update_aliases(self, actions: list[dict[str, Any]]) -> None:
        """Apply every action or none: all are checked against a copy first, as OpenSearch does."""
        plan = {name: dict(idx.aliases) for name, idx in self.indexes.items()}
        removed: list[str] = []
        for action in actions:
            if len(action) != 1:
                raise HttpError(400, "illegal_argument_exception", f"one action per object, got {list(action)}")
            ((kind, spec),) = action.items()
            names = [spec["index"]] if "index" in spec else list(spec.get("indices", []))
            if not names:
                raise HttpError(400, "action_request_validation_exception", "index is missing")
            targets: list[str] = []
            for name in names:
                found = self.resolve(name, missing_ok=kind == "remove" and not spec.get("must_exist"))
                targets += [t for t in found if t not in removed]
            if kind == "remove_index":
                for t in targets:
                    plan.pop(t, None)
                    removed.append(t)
                continue
            alias_names = [spec["alias"]] if "alias" in spec else list(spec.get("aliases", []))
            if not alias_names:
                raise HttpError(400, "action_request_validation_exception", "alias is missing")
            for t in targets:
                for alias in alias_names:
                    if kind == "add":
                        props = {k: v for k, v in spec.items() if k not in ("index", "indices", "alias", "aliases")}
                        plan[t][alias] = props
                    elif kind == "remove":
                        if alias not in plan[t]:
                            if spec.get("must_exist"):
                                raise HttpError(404, "aliases_not_found_exception", f"aliases [{alias}] missing", t)
                            continue
                        del plan[t][alias]
                    else:
                        raise HttpError(400, "illegal_argument_exception", f"unknown alias action [{kind}]")
        for name in removed:
            self.indexes.pop(name, None)
        for name, aliases in plan.items():
            self.indexes[name].aliases = aliases

    # -- bulk --------------------------------------------------------------------------------
    def bulk(self, body: bytes | bytearray, default_index: str | None, brief: bool = False) -> bytes:
        """Acknowledge every action of an NDJSON body without decoding its documents.

        *brief*: the client asked for ``filter_path=errors,items.*.status,items.*.error`` (as
        sparkindex and es-hadoop do), so each item answers with its status and error only.

        The action lines (a few dozen bytes) are parsed; each document line is skipped by finding
        its newline. Where an (operation, index) pair lands is resolved once per request, and each
        answer is one ``%`` of a byte template: per item, the loop does little more than parse.
        """
        t0 = time.perf_counter()
        items: list[bytes] = []
        routes: dict[tuple[str, str | None], tuple[str | None, bytes, bytes]] = {}
        counts: dict[tuple[str, str | None], int] = {}
        seq = self.seq
        pos, end = 0, len(body)
        find, loads, dumps = body.find, orjson.loads, orjson.dumps
        while pos < end:
            nl = find(b"\n", pos)
            if nl < 0:
                nl = end
            if nl == pos:
                pos += 1
                continue
            ((op, meta),) = loads(body[pos:nl]).items()
            pos = nl + 1
            if op != "delete":  # index, create and update carry a document line: skip it
                nl = find(b"\n", pos)
                pos = end if nl < 0 else nl + 1
            key = (op, meta.get("_index", default_index))
            route = routes.get(key)
            if route is None:
                route = routes[key] = self._route(*key)
            seq += 1
            doc_id = meta.get("_id")
            version = meta.get("version", 1)
            if brief:
                items.append(route[2])
            else:
                items.append(route[1] % (dumps(f"null-{seq}" if doc_id is None else doc_id), version, seq))
            counts[key] = counts.get(key, 0) + 1
        self.seq = seq
        errors = False
        for key, n in counts.items():
            name = routes[key][0]
            if name is None:
                errors = True
            elif key[0] == "delete":
                self.indexes[name].docs = max(0, self.indexes[name].docs - n)
            elif key[0] != "update":
                self.indexes[name].docs += n
        self.stats["bulk_requests"] += 1
        self.stats["bulk_items"] += len(items)
        self.stats["bulk_bytes"] += end
        took = int((time.perf_counter() - t0) * 1000)
        if brief:
            head = b'{"errors":%s,"items":[' % (b"true" if errors else b"false")
        else:
            head = b'{"took":%d,"errors":%s,"items":[' % (took, b"true" if errors else b"false")
        return head + b",".join(items) + b"]}"

    def _route(self, op: str, name: str | None) -> tuple[str | None, bytes, bytes]:
        """The index an (operation, index or alias) lands in, its answer's template (``%`` of the
        id as JSON, the version, the sequence number) and its brief answer; no index on failure."""
        try:
            if not name:
                raise HttpError(400, "action_request_validation_exception", "index is missing")
            index = self.write_index(name)
        except HttpError as exc:
            error = orjson.dumps(exc.body()["error"])
            head = b'{"%s":{"_index":%s,"_id":' % (op.encode(), orjson.dumps(name).replace(b"%", b"%%"))
            brief = b'{"%s":{"status":%d,"error":' % (op.encode(), exc.status) + error + b"}}"
            full = (
                head
                + b'%s,"_version":%d,"_seq_no":%d,"status":'
                + b'%d,"error":' % exc.status
                + error.replace(b"%", b"%%")
                + b"}}"
            )
            return None, full, brief
        result, status = {"delete": (b"deleted", 200), "update": (b"updated", 200)}.get(op, (b"created", 201))
        head = b'{"%s":{"_index":%s,"_id":' % (op.encode(), orjson.dumps(index).replace(b"%", b"%%"))
        tail = b',"result":"%s","_shards":{"total":1,"successful":1,"failed":0},"_primary_term":1,"status":%d}}' % (
            result,
            status,
        )
        return index, head + b'%s,"_version":%d,"_seq_no":%d' + tail, b'{"%s":{"status":%d}}' % (op.encode(), status)


SHARDS = {"total": 1, "successful": 1, "skipped": 0, "failed": 0}


class Api:
    """Routes a request to the state; returns (status, JSON body or None for an empty one)."""

    def __init__(self, state: State, port: int) -> None:
        self.state = state
        self.port = port

    def handle(self, method: str, target: str, body: bytes | bytearray) -> tuple[int, bytes | Any]:
        path, _, query_text = target.partition("?")
        query = dict(parse_qsl(query_text, keep_blank_values=True))
        parts = [unquote(p) for p in path.split("/") if p]
        st = self.state
        st.stats["requests"] += 1
        n = len(parts)
        head = parts[0] if parts else ""
        if n == 0:
            return 200, self.info()
        if parts[-1] == "_bulk" and n <= 2 and method in ("POST", "PUT"):
            brief = "items.*.status" in query.get("filter_path", "").split(",")
            return 200, st.bulk(body, parts[0] if n == 2 else None, brief)
        if head == "_null" and parts[1:] == ["stats"]:
            return 200, {**st.stats, "cpu_s": time.process_time(), "pid": os.getpid()}
        if head == "_cluster" and n >= 2 and parts[1] == "health":
            return 200, self.health()
        if head == "_aliases" and n == 1:
            if method == "GET":
                return 200, self.get_aliases(st.resolve("_all"), None)
            if method == "POST":
                st.update_aliases(orjson.loads(body).get("actions", []))
                return 200, {"acknowledged": True}
        if head == "_alias" and n <= 2 and method in ("GET", "HEAD"):
            return self.alias_answer(st.resolve("_all"), parts[1] if n == 2 else None)
        if head in ("_refresh", "_flush", "_forcemerge") and n == 1:
            return 200, {"_shards": SHARDS}
        if head in ("_count", "_search") and n == 1:
            return self.count_or_search(head, st.resolve("_all"), "scroll" in query)
        if head == "_search" and parts[1:] == ["scroll"]:  # a scroll never has a second page here
            if method == "DELETE":
                return 200, {"succeeded": True, "num_freed": 1}
            return self.count_or_search("_search", [], True)
        if head == "_cat" and n == 2 and parts[1] in ("indices", "aliases"):
            return self.cat(parts[1], query)
        if head.startswith("_"):
            return self.unknown(method, target)
        return self.index_api(method, head, parts[1:], body, query, target)

    def index_api(
        self, method: str, expr: str, rest: list[str], body: bytes | bytearray, query: dict[str, str], target: str
    ) -> tuple[int, bytes | Any]:
        st = self.state
        op = rest[0] if rest else ""
        if not rest:
            if method == "PUT":
                return 200, self.create(expr, orjson.loads(body) if body else {})
            if method == "HEAD":
                return (200 if all(n in st.indexes for n in expr.split(",")) else 404), None
            if method == "DELETE":
                names = st.resolve(expr, missing_ok=query.get("ignore_unavailable") == "true")
                for name in names:
                    del st.indexes[name]
                return 200, {"acknowledged": True}
            if method == "GET":
                return 200, {n: self.describe(n) for n in st.resolve(expr)}
        elif op == "_settings" and len(rest) == 2 and method == "GET":
            return 200, {n: {"settings": _filtered(self.settings_of(n), rest[1])} for n in st.resolve(expr)}
        elif op == "_doc" and len(rest) == 2:
            return self.doc(method, expr, rest[1], query)
        elif op in ("_settings", "_mapping", "_mappings") and len(rest) == 1:
            names = st.resolve(expr)
            if method == "GET" and op == "_settings":
                return 200, {n: {"settings": self.settings_of(n)} for n in names}
            if method == "GET":
                return 200, {n: {"mappings": st.indexes[n].mappings} for n in names}
            if method in ("PUT", "POST"):
                update = orjson.loads(body)
                for n in names:
                    if op == "_settings":
                        _merge(st.indexes[n].settings, _index_settings(update))
                    else:
                        _merge(st.indexes[n].mappings, update)
                return 200, {"acknowledged": True}
        elif op in ("_alias", "_aliases") and len(rest) <= 2:
            names = st.resolve(expr)
            if method in ("GET", "HEAD"):
                if len(rest) == 1:
                    return 200, self.get_aliases(names, None)
                return self.alias_answer(names, rest[1])
            if method in ("PUT", "POST") and len(rest) == 2:
                props = orjson.loads(body) if body else {}
                st.update_aliases([{"add": {"indices": names, "alias": rest[1], **props}}])
                return 200, {"acknowledged": True}
            if method == "DELETE" and len(rest) == 2:
                st.update_aliases([{"remove": {"indices": names, "alias": rest[1], "must_exist": True}}])
                return 200, {"acknowledged": True}
        elif op in ("_refresh", "_flush", "_forcemerge") and len(rest) == 1:
            st.resolve(expr)
            return 200, {"_shards": SHARDS}
        elif op in ("_count", "_search") and len(rest) == 1:
            names = st.resolve(expr, missing_ok=query.get("ignore_unavailable") == "true")
            return self.count_or_search(op, names, "scroll" in query)
        return self.unknown(method, target)

    # -- answers -----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {
            "name": "sparkindex-null",
            "cluster_name": "sparkindex-null",
            "cluster_uuid": "null-endpoint",
            "version": {
                "distribution": "opensearch",
                "number": VERSION,
                "build_type": "tar",
                "build_hash": "null",
                "build_date": "2024-01-01T00:00:00Z",
                "build_snapshot": False,
                "lucene_version": "9.11.1",
                "minimum_wire_compatibility_version": "7.10.0",
                "minimum_index_compatibility_version": "7.0.0",
            },
            "tagline": "The OpenSearch Project: https://opensearch.org/",
        }

    def health(self) -> dict[str, Any]:
        return {
            "cluster_name": "sparkindex-null",
            "status": "green",
            "timed_out": False,
            "number_of_nodes": 1,
            "number_of_data_nodes": 1,
            "active_primary_shards": len(self.state.indexes),
            "active_shards": len(self.state.indexes),
            "relocating_shards": 0,
            "initializing_shards": 0,
            "unassigned_shards": 0,
            "delayed_unassigned_shards": 0,
            "number_of_pending_tasks": 0,
            "number_of_in_flight_fetch": 0,
            "task_max_waiting_in_queue_millis": 0,
            "active_shards_percent_as_number": 100.0,
        }

    def create(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        st = self.state
        if name in st.indexes or name in st.aliases():
            raise HttpError(400, "resource_already_exists_exception", f"index [{name}] already exists", name)
        settings = spec.get("settings", {})
        idx = Index(_index_settings(settings), dict(spec.get("mappings", {})))
        idx.aliases = {alias: dict(props) for alias, props in spec.get("aliases", {}).items()}
        st.indexes[name] = idx
        return {"acknowledged": True, "shards_acknowledged": True, "index": name}

    def settings_of(self, name: str) -> dict[str, Any]:
        idx = self.state.indexes[name]
        base = {"number_of_shards": "1", "number_of_replicas": "1", "provided_name": name, "uuid": name}
        merged = _flat_settings({**base, "creation_date": str(idx.created)})
        _merge(merged, _flat_settings(idx.settings))
        return merged

    def describe(self, name: str) -> dict[str, Any]:
        idx = self.state.indexes[name]
        return {"aliases": idx.aliases, "mappings": idx.mappings, "settings": self.settings_of(name)}

    def get_aliases(self, names: list[str], alias: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in names:
            aliases = self.state.indexes[name].aliases
            chosen = {a: p for a, p in aliases.items() if alias is None or fnmatch.fnmatchcase(a, alias)}
            if alias is None or chosen:
                out[name] = {"aliases": chosen}
        return out

    def alias_answer(self, names: list[str], alias: str | None) -> tuple[int, Any]:
        found = self.get_aliases(names, alias)
        if alias is not None and not found and not any(c in alias for c in "*?"):  # a wildcard finds {}
            return 404, {"error": f"alias [{alias}] missing", "status": 404}
        return 200, found

    def count_or_search(self, op: str, names: list[str], scroll: bool = False) -> tuple[int, Any]:
        shards = {**SHARDS, "total": len(names), "successful": len(names)}
        if op == "_count":
            return 200, {"count": sum(self.state.indexes[n].docs for n in names), "_shards": shards}
        hits: dict[str, Any] = {"total": {"value": 0, "relation": "eq"}, "max_score": None, "hits": []}
        found: dict[str, Any] = {"took": 0, "timed_out": False, "_shards": shards, "hits": hits}
        if scroll:
            found["_scroll_id"] = "null-scroll"
        return 200, found

    def doc(self, method: str, expr: str, doc_id: str, query: dict[str, str]) -> tuple[int, Any]:
        """Single documents: only their versions are kept (the target records fencing tokens as
        documents with external versions, so a stale token must get its 409)."""
        st = self.state
        if method in ("PUT", "POST"):
            name = st.write_index(expr)
            idx = st.indexes[name]
            current = idx.versions.get(doc_id)
            kind = query.get("version_type", "internal")
            if kind.startswith("external"):
                version = int(query["version"])
                stale = current is not None and (version < current if kind == "external_gte" else version <= current)
                if stale:
                    reason = f"[{doc_id}]: version conflict, current version [{current}] is higher than [{version}]"
                    raise HttpError(409, "version_conflict_engine_exception", reason, name)
            else:
                version = (current or 0) + 1
            idx.versions[doc_id] = version
            if current is None:
                idx.docs += 1
            st.seq += 1
            answer = {"_index": name, "_id": doc_id, "_version": version, "_seq_no": st.seq, "_primary_term": 1}
            created = current is None
            return (201 if created else 200), {
                **answer,
                "result": "created" if created else "updated",
                "_shards": SHARDS,
            }
        names = st.resolve(expr)
        stored = st.indexes[names[0]].versions.get(doc_id) if names else None
        if method == "DELETE":
            if stored is None:
                return 404, {"_index": expr, "_id": doc_id, "result": "not_found"}
            del st.indexes[names[0]].versions[doc_id]
            st.indexes[names[0]].docs = max(0, st.indexes[names[0]].docs - 1)
            return 200, {"_index": names[0], "_id": doc_id, "result": "deleted", "_shards": SHARDS}
        if stored is None:
            return 404, {"_index": expr, "_id": doc_id, "found": False}
        return 200, {"_index": names[0], "_id": doc_id, "_version": stored, "found": True, "_source": {}}

    def cat(self, what: str, query: dict[str, str]) -> tuple[int, Any]:
        st = self.state
        if what == "indices":
            rows: list[dict[str, Any]] = [
                {"health": "green", "status": "open", "index": n, "docs.count": str(i.docs)}
                for n, i in sorted(st.indexes.items())
            ]
        else:
            rows = [{"alias": a, "index": n} for a, ns in sorted(st.aliases().items()) for n in ns]
        if query.get("format") == "json":
            return 200, rows
        text = "".join(" ".join(str(v) for v in row.values()) + "\n" for row in rows)
        return 200, text.encode()

    def unknown(self, method: str, target: str) -> tuple[int, Any]:
        key = f"{method} {target.partition('?')[0]}"
        unknown = self.state.stats["unknown"]
        unknown[key] = unknown.get(key, 0) + 1
        if unknown[key] == 1:
            print(f"null endpoint: 404 for unknown {key}", file=sys.stderr, flush=True)
        err = HttpError(404, "null_endpoint_unknown_path", f"the null endpoint does not answer {key}")
        return 404, err.body()


class HttpProtocol(asyncio.BufferedProtocol):
    """HTTP/1.1 with keep-alive, Content-Length or chunked bodies, gzip request bodies.

    A buffered protocol, so the kernel copies a request body straight into a buffer of its final
    size (``recv_into``); a 12 MB bulk is never accumulated chunk by chunk. Heads (and chunked
    bodies, which no client in use sends) go through a small input buffer first.
    """

    def __init__(self, api: Api) -> None:
        self.api = api
        self.inbuf = bytearray(INBUF)
        self.inlen = 0
        self.body: bytearray | None = None  # a body being received, of its announced length
        self.got = 0
        self.request: tuple[str, str, dict[str, str]] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.body is not None:
            return memoryview(self.body)[self.got :]
        if self.inlen == len(self.inbuf):  # a chunked body larger than the buffer
            self.inbuf += bytes(len(self.inbuf))
        return memoryview(self.inbuf)[self.inlen :]

    def buffer_updated(self, nbytes: int) -> None:
        if self.body is None:
            self.inlen += nbytes
            self.process()
            return
        self.got += nbytes
        if self.got == len(self.body):
            body, self.body = self.body, None
            self.finish(body)

    def consume(self, n: int) -> None:
        """Drop the first *n* bytes of the input buffer (what is left moves to its start)."""
        self.inbuf[: self.inlen - n] = self.inbuf[n : self.inlen]
        self.inlen -= n

    def process(self) -> None:
        while self.transport is not None and not self.transport.is_closing():
            if self.request is None:
                end = self.inbuf.find(b"\r\n\r\n", 0, self.inlen)
                if end < 0:
                    if self.inlen > MAX_HEAD:
                        self.respond(431, {"error": "request head too large"}, close=True)
                    return
                if not self.parse_head(bytes(self.inbuf[:end])):
                    return
                self.consume(end + 4)
            assert self.request is not None
            headers = self.request[2]
            if "chunked" in headers.get("transfer-encoding", "").lower():
                decoded = _dechunk(self.inbuf, self.inlen)
                if decoded is None:
                    return
                body, used = decoded
                self.consume(used)
                self.finish(body)
                continue
            need = int(headers.get("content-length", "0") or 0)
            if self.inlen >= need:
                body = self.inbuf[:need]
                self.consume(need)
                self.finish(body)
                continue
            self.body = bytearray(need)  # the rest arrives straight into it (get_buffer)
            self.body[: self.inlen] = self.inbuf[: self.inlen]
            self.got, self.inlen = self.inlen, 0
            return

    def parse_head(self, head: bytes) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            self.respond(400, {"error": "bad request line"}, close=True)
            return False
        headers = {":version": version}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.request = (method, target, headers)
        if headers.get("expect", "").lower() == "100-continue":
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def finish(self, body: bytearray) -> None:
        assert self.request is not None
        method, target, headers = self.request
        self.request = None
        if headers.get("content-encoding", "").lower() == "gzip":
            body = bytearray(zlib.decompress(body, 31))
        connection = headers.get("connection", "").lower()
        close = connection == "close" or (headers[":version"] == "HTTP/1.0" and connection != "keep-alive")
        try:
            status, payload = self.api.handle(method, target, body)
        except HttpError as exc:
            status, payload = exc.status, exc.body()
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            status, payload = 400, HttpError(400, "parse_exception", f"{type(exc).__name__}: {exc}").body()
        self.respond(status, payload, close=close, head=method == "HEAD")

    def respond(self, status: int, payload: bytes | Any, close: bool = False, head: bool = False) -> None:
        if self.transport is None:
            return
        body = payload if isinstance(payload, bytes) else b"" if payload is None else orjson.dumps(payload)
        kind = b"text/plain" if isinstance(payload, bytes) and not payload.startswith(b"{") else b"application/json"
        lines = b"HTTP/1.1 %d %s\r\ncontent-type: %s; charset=UTF-8\r\ncontent-length: %d\r\n" % (
            status,
            REASONS.get(status, "Error").encode(),
            kind,
            len(body),
        )
        if close:
            lines += b"connection: close\r\n"
        self.transport.write(lines + b"\r\n" + (b"" if head else body))
        if close:
            self.transport.close()


def _dechunk(buf: bytearray, length: int) -> tuple[bytearray, int] | None:
    """A whole chunked body from the first *length* bytes of *buf*: (body, bytes used), or None
    while incomplete."""
    out, pos = bytearray(), 0
    while True:
        nl = buf.find(b"\r\n", pos, length)
        if nl < 0:
            return None
        size = int(bytes(buf[pos:nl]).split(b";")[0], 16)
        pos = nl + 2
        if size == 0:
            end = buf.find(b"\r\n", pos, length)  # no trailers are sent by the clients in use
            return (out, end + 2) if end >= 0 else None
        if length < pos + size + 2:
            return None
        out += buf[pos : pos + size]
        pos += size + 2


async def serve(host: str, port: int, parent_pid: int | None) -> None:
    loop = asyncio.get_running_loop()
    state = State()
    api = Api(state, port)
    server = await loop.create_server(lambda: HttpProtocol(api), host, port, backlog=256)
    bound = server.sockets[0].getsockname()[1]
    api.port = bound
    print(orjson.dumps({"listening": f"{host}:{bound}", "pid": os.getpid()}).decode(), flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def watch_parent() -> None:
        """Ends the server when whoever started it is gone, so a crashed benchmark leaves nothing."""
        if parent_pid is not None and not _alive(parent_pid):
            stop.set()
            return
        loop.call_later(1.0, watch_parent)

    watch_parent()
    async with server:
        await stop.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the caller's side: start, ask, stop ------------------------------------------------------------
@dataclass
class NullEndpoint:
    """A running endpoint process (see :func:`null_endpoint`)."""

    proc: subprocess.Popen[str]
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"opensearch://{self.host}:{self.port}"

    @property
    def http(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.http}/_null/stats", timeout=10) as resp:
            parsed: dict[str, Any] = orjson.loads(resp.read())
        return parsed


@contextlib.contextmanager
def null_endpoint(host: str = "127.0.0.1", port: int = 0, timeout: float = 30) -> Iterator[NullEndpoint]:
    """Start ``python -m bench.null_endpoint`` and wait for its ready line; stop it on exit.

    Port 0 lets the kernel choose a free port, which the ready line reports.
    """
    cmd = [sys.executable, "-m", "bench.null_endpoint", "--host", host, "--port", str(port)]
    cmd += ["--parent-pid", str(os.getpid())]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until bound, or EOF if it died
        if not line:
            raise RuntimeError(f"the null endpoint exited {proc.wait(timeout)} before listening")
        bound = int(orjson.loads(line)["listening"].rsplit(":", 1)[1])
        yield NullEndpoint(proc, host, bound)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.null_endpoint", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9200, help="0: any free port (reported on the ready line)")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.parent_pid))


if __name__ == "__main__":
    main()

"""An HTTP proxy in front of osmem-server (a TEST DOUBLE of OpenSearch) for what osmem cannot do.

* A personality (``personality=``, :mod:`tests.support.personalities`): the wire rules of one
  engine version (its root, product header, accepted media types, refused fields, SigV4).
  ``elasticsearch=True`` is Elasticsearch 9's. Without one, osmem answers as itself.
* Faults: whole-request error statuses (429, 503, 401, 413...), per-item rejections inside a
  ``_bulk`` (the rejected items are taken out of the request before it is forwarded, so the
  server never applies them, exactly as a real rejection), connections closed without an answer,
  and requests held until the client times out. osmem itself cannot return 429s.
* TLS termination (``ssl_context``), to test certificate handling.

Every forwarded ``_bulk`` is recorded (its ids, in order), so tests can check what was resent.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import socket
import ssl
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import orjson

from tests.support.personalities import ES_9, VERSIONED, Personality, plain

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "accept-encoding"}
HOLD_LIMIT_S = 30.0  # a held request is answered (502) after this at the latest


@dataclass
class _Rule:
    kind: str  # "status" | "drop" | "hold"
    count: int
    path: str
    status: int = 503
    body: dict[str, Any] | None = None


@dataclass
class BulkRecord:
    path: str
    ids: list[str]
    gzip: bool
    #: (op, id, routing) of each item forwarded, in order
    actions: list[tuple[str, str, str | None]] = field(default_factory=list)


@dataclass
class _State:
    rules: list[_Rule] = field(default_factory=list)
    reject: dict[str, list[int]] = field(default_factory=dict)  # id -> statuses still to return
    bulks: list[BulkRecord] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    #: every Content-Type and Accept value received
    media_types: list[str] = field(default_factory=list)
    #: the bodies of POST /_aliases, as received
    alias_bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request (a killed worker, a cut network) is what the
        faults make happen, not a proxy failure: printing its traceback would bury real ones."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class HttpProxy:
    def __init__(
        self,
        upstream: str,
        *,
        elasticsearch: bool = False,
        personality: Personality | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.personality = personality or (ES_9 if elasticsearch else None)
        self.strip_product_header = False
        self.state = _State()
        handler = _handler_class(self)
        self.server = _Server(("127.0.0.1", 0), handler)
        if ssl_context is not None:
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.host_port = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="http-proxy", daemon=True)
        self._thread.start()

    # -- faults ----------------------------------------------------------------------------------------
    def fail_next(self, status: int, count: int = 1, path: str = "", body: dict[str, Any] | None = None) -> _Rule:
        """Answer the next *count* requests whose path contains *path* with *status*. The rule is
        returned: its ``count`` is what is left of it."""
        reason = f"injected {status} (fault proxy)"
        error = body or {"error": {"type": f"http_{status}", "reason": reason}, "status": status}
        rule = _Rule("status", count, path, status, error)
        with self.state.lock:
            self.state.rules.append(rule)
        return rule

    def drop_next(self, count: int = 1, path: str = "") -> _Rule:
        """Close the connection of the next *count* matching requests without answering."""
        rule = _Rule("drop", count, path)
        with self.state.lock:
            self.state.rules.append(rule)
        return rule

    def clear_rules(self) -> int:
        """Drop every rule not yet used up (a fault must not act past its window); how many
        requests they would still have failed."""
        with self.state.lock:
            left = sum(r.count for r in self.state.rules)
            self.state.rules.clear()
        return left

    def hold_next(self, count: int = 1, path: str = "") -> None:
        """Hold the next *count* matching requests unanswered until :meth:`close` (or
        HOLD_LIMIT_S): the client's own request timeout is what ends them."""
        with self.state.lock:
            self.state.rules.append(_Rule("hold", count, path))

    def reject_items(self, ids: list[str], status: int = 429, times: int = 1) -> None:
        """Reject these documents inside ``_bulk`` requests *times* times each, with *status*."""
        with self.state.lock:
            for doc_id in ids:
                self.state.reject[doc_id] = [status] * times

    @property
    def bulks(self) -> list[BulkRecord]:
        with self.state.lock:
            return list(self.state.bulks)

    @property
    def requests(self) -> list[tuple[str, str]]:
        with self.state.lock:
            return list(self.state.requests)

    @property
    def media_types(self) -> list[str]:
        with self.state.lock:
            return list(self.state.media_types)

    @property
    def alias_bodies(self) -> list[bytes]:
        with self.state.lock:
            return list(self.state.alias_bodies)

    def close(self) -> None:
        self.state.release.set()
        self.server.shutdown()
        self.server.server_close()

    def _take_rule(self, path: str) -> _Rule | None:
        with self.state.lock:
            for rule in self.state.rules:
                if rule.count > 0 and rule.path in path:
                    rule.count -= 1
                    return rule
        return None


def _handler_class(proxy: HttpProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _any(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            sent = {k.lower(): v for k, v in self.headers.items()}
            signed_body = body
            zipped = (self.headers.get("content-encoding") or "").lower() == "gzip"
            if zipped:
                body = gzip.decompress(body)
            with proxy.state.lock:
                proxy.state.requests.append((self.command, self.path))
                proxy.state.media_types += [sent.get("content-type", ""), sent.get("accept", "")]
                if self.command == "POST" and self.path.split("?")[0] == "/_aliases":
                    proxy.state.alias_bodies.append(body)
            persona = proxy.personality
            if persona is not None:
                refused = (
                    persona.refuse_signature(self.command, self.path, sent, signed_body)
                    or persona.refuse_media_types(sent)
                    or persona.refuse_body(self.command, self.path, body)
                )
                if refused is not None:
                    self._answer(refused[0], orjson.dumps(refused[1]), {})
                    return
                if self.command in ("GET", "HEAD") and self.path.split("?")[0] in ("", "/"):
                    self._answer(200, orjson.dumps(persona.root()), {})
                    return
            rule = proxy._take_rule(self.path)
            if rule is not None and rule.kind == "drop":
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if rule is not None and rule.kind == "hold":
                proxy.state.release.wait(HOLD_LIMIT_S)
                self._answer(502, orjson.dumps({"error": "held by the fault proxy"}), {})
                return
            if rule is not None:
                self._answer(rule.status, orjson.dumps(rule.body), {})
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            if persona is not None:  # accepted by the personality's rules: osmem reads plain JSON
                for key in list(headers):
                    if key.lower() in ("content-type", "accept"):
                        headers[key] = plain(headers[key])
            rejected: list[tuple[int, str, str, int]] = []
            if self.path.split("?")[0].endswith("/_bulk"):
                body, rejected, actions = _take_rejected(body, proxy)
                with proxy.state.lock:
                    proxy.state.bulks.append(BulkRecord(self.path, [a[1] for a in actions], zipped, actions))
            if rejected and not body:  # every item rejected: nothing to forward
                status, out_headers, data = 200, {}, b""
            else:
                status, out_headers, data = self._forward(headers, body)
            if rejected and status == 200:
                data = _merge_rejected(data, rejected)
            self._answer(status, data, out_headers)

        def _forward(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
            conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
            try:
                send = body if body or self.command in ("POST", "PUT") else None
                conn.request(self.command, self.path, body=send, headers=headers)
                resp = conn.getresponse()
                return resp.status, {k: v for k, v in resp.getheaders() if k.lower() not in _HOP}, resp.read()
            finally:
                conn.close()

        def _answer(self, status: int, data: bytes, headers: dict[str, str]) -> None:
            with contextlib.suppress(OSError):  # the client gave up (a held request)
                self._write(status, data, headers)

        def _write(self, status: int, data: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            persona = proxy.personality
            product = persona.sends_product_header if persona is not None else None
            if proxy.strip_product_header:
                product = False
            asked = VERSIONED.search(self.headers.get("accept") or "")
            for key, value in headers.items():
                if key.lower() == "x-elastic-product" and product is not None:
                    continue  # the personality decides
                if key.lower() == "content-type" and asked is not None and persona is not None:
                    continue  # answered in the versioned type asked for, below
                self.send_header(key, value)
            if asked is not None and persona is not None and persona.is_elasticsearch:
                self.send_header("Content-Type", f"application/vnd.elasticsearch+json;compatible-with={asked[2]}")
            elif "content-type" not in {k.lower() for k in headers}:
                self.send_header("Content-Type", "application/json")
            if product:
                self.send_header("X-Elastic-Product", "Elasticsearch")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _any

    return Handler


def _take_rejected(
    body: bytes, proxy: HttpProxy
) -> tuple[bytes, list[tuple[int, str, str, int]], list[tuple[str, str, str | None]]]:
    """Split a bulk body into what is forwarded and the items rejected here (position, op, id,
    status); the forwarded items' (op, id, routing)."""
    lines = body.split(b"\n")
    kept: list[bytes] = []
    rejected: list[tuple[int, str, str, int]] = []
    ids: list[tuple[str, str, str | None]] = []
    i = pos = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        action = orjson.loads(lines[i])
        op = next(iter(action))
        doc_id = str(action[op].get("_id"))
        span = lines[i : i + (1 if op == "delete" else 2)]
        i += len(span)
        with proxy.state.lock:
            statuses = proxy.state.reject.get(doc_id)
            status = statuses.pop(0) if statuses else None
        if status is None:
            kept.extend(span)
            routing = action[op].get("routing", action[op].get("_routing"))
            ids.append((op, doc_id, None if routing is None else str(routing)))
        else:
            rejected.append((pos, op, doc_id, status))
        pos += 1
    return b"\n".join(kept) + b"\n" if kept else b"", rejected, ids


def _merge_rejected(data: bytes, rejected: list[tuple[int, str, str, int]]) -> bytes:
    answer = orjson.loads(data) if data else {"took": 0, "items": []}
    items: list[Any] = list(answer.get("items", []))
    for pos, op, doc_id, status in rejected:
        reason = f"rejected by the fault proxy (test double) with {status}"
        error = {"type": "es_rejected_execution_exception" if status == 429 else f"http_{status}", "reason": reason}
        items.insert(pos, {op: {"_id": doc_id, "status": status, "error": error}})
    answer["items"] = items
    answer["errors"] = True
    return orjson.dumps(answer)

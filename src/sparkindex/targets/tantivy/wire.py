"""The frames spoken between Tantivy bulk clients and the index's writer service.

A frame is a JSON header and an optional binary payload, each length-prefixed. A bulk request
carries the item list in its header and the Tantivy JSON bodies, concatenated, as its payload, so
a batch of thousands of documents crosses the socket in one write and is never re-encoded.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
from typing import Any

import orjson

_LEN = struct.Struct("!II")  # header bytes, payload bytes

#: The longest an applied batch waits for its commit (the service's group-commit timer); clients
#: size their socket timeouts by it. Here, not in the service module, so that importing a client
#: never imports the module ``python -m`` runs as the service.
GROUP_WAIT_S = 10.0


def service_address(index_dir: str | os.PathLike[str]) -> str:
    """The service's Linux abstract socket name: no path length limit, gone when its process dies."""
    digest = hashlib.blake2b(os.path.realpath(index_dir).encode(), digest_size=12).hexdigest()
    return f"\0sparkindex-tantivy-{digest}"


def send_frame(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    head = orjson.dumps(header)
    sock.sendall(_LEN.pack(len(head), len(payload)) + head + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("the writer service closed the connection")
        got += k
    return bytes(buf)


def recv_frame(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    head_len, payload_len = _LEN.unpack(_recv_exact(sock, _LEN.size))
    header: dict[str, Any] = orjson.loads(_recv_exact(sock, head_len))
    payload = _recv_exact(sock, payload_len) if payload_len else b""
    return header, payload

"""The guard's rules on real Starlette connections (scopes as an ASGI server builds them)."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from sparkindex.server.auth import Guard, is_loopback, resolve_token


def conn(client: str, host: str = "127.0.0.1:8484", kind: str = "http", **headers: str) -> HTTPConnection:
    raw = [(b"host", host.encode())] + [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return HTTPConnection({"type": kind, "client": (client, 50000), "headers": raw, "path": "/", "query_string": b""})


def test_reads_are_open_to_this_machine_only() -> None:
    guard = Guard(token="s3cret", bind_host="0.0.0.0")
    assert guard.may_read(conn("127.0.0.1")) and guard.may_read(conn("::1"))
    assert not guard.may_read(conn("192.0.2.7"))
    assert guard.may_read(conn("192.0.2.7", authorization="Bearer s3cret"))
    assert not guard.may_read(conn("192.0.2.7", authorization="Bearer wrong"))


def test_changes_need_the_token_from_anywhere() -> None:
    guard = Guard(token="s3cret", bind_host="127.0.0.1")
    assert guard.token_problem(conn("127.0.0.1")) is not None
    assert guard.token_problem(conn("127.0.0.1", authorization="Bearer s3cret")) is None
    assert guard.token_problem(conn("127.0.0.1", authorization="bearer  s3cret ")) is None
    assert guard.token_problem(conn("127.0.0.1", authorization="Bearer s3cre")) == "wrong token"


def test_host_and_origin_checks_apply_while_bound_to_loopback() -> None:
    local = Guard(token="t", bind_host="127.0.0.1")
    assert local.host_problem(conn("127.0.0.1", host="localhost:8484")) is None
    assert local.host_problem(conn("127.0.0.1", host="[::1]:8484")) is None
    assert "rebind.example" in str(local.host_problem(conn("127.0.0.1", host="rebind.example:8484")))
    ws_foreign = conn("127.0.0.1", kind="websocket", origin="https://evil.example")
    assert "evil.example" in str(local.host_problem(ws_foreign))
    assert local.host_problem(conn("127.0.0.1", kind="websocket", origin="http://127.0.0.1:8484")) is None
    public = Guard(token="t", bind_host="0.0.0.0")
    assert public.host_problem(conn("192.0.2.7", host="indexer.internal:8484")) is None


def test_token_from_the_environment_or_generated() -> None:
    assert resolve_token({"SPARKINDEX_TOKEN": " mine "}) == ("mine", False)
    token, generated = resolve_token({})
    assert generated and len(token) >= 24 and token != resolve_token({})[0]
    assert is_loopback("localhost") and is_loopback("127.9.9.9") and not is_loopback("10.0.0.1")

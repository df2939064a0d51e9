"""A failed request to the target is one log line, not a traceback (found by the chaos campaign:
a dropped connection printed fifty lines of urllib3 frames per retry)."""

from __future__ import annotations

import logging
import socket

import pytest

from sparkindex.targets.registry import open_target


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("scheme", ["opensearch", "elasticsearch"])
@pytest.mark.parametrize("max_retries", [0, 2], ids=["no-retries", "retries"])
def test_a_refused_request_logs_one_line(
    scheme: str, max_retries: int, tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    """With retries (the default), elastic_transport logs each retry on a logger of its own,
    ``elastic_transport.transport``, with the stack: a parent logger's filter never sees it."""
    caplog.set_level(logging.WARNING)
    target = open_target(f"{scheme}://127.0.0.1:{_closed_port()}", tmp_path, {"max_retries": max_retries})  # type: ignore[arg-type]
    try:
        with pytest.raises(Exception):  # noqa: B017 - whichever error the target maps a refusal to
            target.alias_target("products")
    finally:
        target.close()
    client_records = [r for r in caplog.records if r.name.split(".")[0] in ("opensearch", "elastic_transport")]
    assert client_records, "the client logged nothing: the test would prove nothing"
    assert "Traceback" not in caplog.text
    # the line still says what failed
    assert any("Error" in r.getMessage() or "failed" in r.getMessage() for r in client_records)

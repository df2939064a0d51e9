"""py4j's report of a call whose connection broke stays out of the user's terminal.

CI's SIGTERM-to-the-group sync test failed on it once: the JVM ended (systemd signals every
process of the service) while the driver asked it for the message of the exception that had
stopped the stream. py4j logged the reset connection at ERROR with 40 lines of frames, then raised
to the caller, who handled it: the sync stopped cleanly, exit 0, and still printed a traceback.

The broken connection is real here: a server that speaks for the JVM reads the command, then
resets the connection (SO_LINGER 0), which is what the driver saw. The client is py4j's own
``ClientServer``, set up as pyspark sets it up.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from py4j.clientserver import ClientServer, JavaParameters, PythonParameters


@pytest.fixture
def resetting_jvm() -> Iterator[int]:
    """A port whose server reads one command, then resets the connection."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            received = b""
            while not received.endswith(b"\ne\n"):  # a py4j command ends with its "e" line
                chunk = conn.recv(4096)
                if not chunk:
                    return
                received += chunk
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    server.close()
    thread.join(timeout=10)


def _call_through_a_reset(port: int) -> BaseException:
    gateway = ClientServer(
        # a read timeout: a retry into the listening socket's backlog fails rather than hangs
        java_parameters=JavaParameters(port=port, auto_convert=True, eager_load=False, read_timeout=20),
        python_parameters=PythonParameters(port=0, eager_load=False),
    )
    try:
        with pytest.raises(Exception) as raised:
            gateway.jvm.java.lang.System.currentTimeMillis()
        return raised.value
    finally:
        gateway.shutdown()


def _py4j_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "py4j" in r.pathname]


def test_a_reset_connection_reaches_the_caller_without_a_logged_stack(
    spark: Any, resetting_jvm: int, caplog: pytest.LogCaptureFixture
) -> None:
    # *spark*: the session was built by build_session, which installs the filter, as the CLI's is
    caplog.set_level(logging.WARNING)
    failure = _call_through_a_reset(resetting_jvm)
    assert "py4j" in type(failure).__module__, f"the caller is told: {failure!r}"
    shown = [r for r in _py4j_records(caplog) if r.levelno >= logging.WARNING]
    assert not shown, [f"{r.levelname} {r.getMessage()}" for r in shown]


def test_the_report_is_kept_at_debug(spark: Any, resetting_jvm: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _call_through_a_reset(resetting_jvm)
    reports = [r for r in _py4j_records(caplog) if r.getMessage() == "Exception while sending command."]
    assert reports, "py4j's report of the reset connection is there at DEBUG"
    assert all(r.levelno == logging.DEBUG for r in reports)
    assert any(r.exc_info and isinstance(r.exc_info[1], Exception) for r in reports), "with its cause"

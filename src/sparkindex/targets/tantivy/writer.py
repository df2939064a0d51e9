"""The client side of an index version's writer service: connect, starting the service if needed.

Any process may be first to write a version (a Spark task, the driver, a DataFrame writer), so
the one that finds no service starts it, under a file lock so that two never race, and waits
until it answers. A request whose connection breaks has an unknown outcome; it is reported as
:class:`TransientError`, and the caller's retry, an upsert, is harmless.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sparkindex.errors import TransientError, WritesLost
from sparkindex.targets.base import WriteMark
from sparkindex.targets.tantivy.wire import GROUP_WAIT_S, recv_frame, send_frame, service_address

SPAWN_LOCK = ".sparkindex-service.lock"
#: the lock file Tantivy's IndexWriter holds while it is open
TANTIVY_WRITER_LOCK = ".tantivy-writer.lock"
SERVICE_LOG = "sparkindex-service.log"


class WriterClient:
    def __init__(self, index_dir: Path, heap_mb: int, threads: int, idle_s: float, start_timeout_s: float) -> None:
        self.index_dir = index_dir
        self.heap_mb = heap_mb
        self.threads = threads
        self.idle_s = idle_s
        self.start_timeout_s = start_timeout_s
        self.address = service_address(index_dir)

    def _try_connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.address)
        except (ConnectionRefusedError, FileNotFoundError):
            sock.close()
            return None
        # A stalled service (stopped, stuck on I/O) must not hang its clients for ever: a reply
        # takes at most one group commit, so anything far beyond that is reported as transient.
        sock.settimeout(self.start_timeout_s + GROUP_WAIT_S)
        return sock

    def connect(self, start: bool = True) -> socket.socket | None:
        """A connection to the running service; with *start*, start one if none runs."""
        sock = self._try_connect()
        if sock is not None or not start:
            return sock
        with open(self.index_dir / SPAWN_LOCK, "a+b") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                sock = self._try_connect()
                if sock is None:
                    sock = self._spawn_and_connect()
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return sock

    def _spawn(self) -> subprocess.Popen[bytes]:
        args = [str(self.index_dir), str(self.heap_mb), str(self.threads), str(self.idle_s)]
        with open(self.index_dir / SERVICE_LOG, "ab") as log_fh:
            return subprocess.Popen(  # detached: it outlives the task that started it
                [sys.executable, "-m", "sparkindex.targets.tantivy.service", *args],
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=log_fh,
                start_new_session=True,
                close_fds=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def _spawn_and_connect(self) -> socket.socket:
        """Start a service and connect. A service that is still exiting holds the address, so a
        new one loses the race and exits at once; then start another until one answers."""
        deadline = time.monotonic() + self.start_timeout_s
        proc = self._spawn()
        pause = 0.005
        while time.monotonic() < deadline:
            sock = self._try_connect()
            if sock is not None:
                return sock
            code = proc.poll()
            if code == 0:
                proc = self._spawn()
            elif code is not None:
                break
            time.sleep(pause)  # the service is opening the index; poll with growing pauses
            pause = min(pause * 2, 0.1)
        raise TransientError(
            f"tantivy writer service for {self.index_dir.name!r} did not start "
            f"(exit {proc.poll()}); see {self.index_dir / SERVICE_LOG}"
        )

    def request(self, header: dict[str, Any], payload: bytes = b"", start: bool = True) -> dict[str, Any] | None:
        """One request and its reply; None when no service runs and *start* is False.

        A connection reset before any reply is retried on a fresh connection, with short growing
        pauses, for up to ``start_timeout_s``: it is what a client meets when it reaches a service
        in its last moments (after ``finish`` or an idle exit), or one that was killed. Every
        request is safe to repeat (bulk items are upserts and deletes by id).
        """
        deadline = time.monotonic() + self.start_timeout_s
        pause = 0.01
        while True:
            sock = self.connect(start)
            if sock is None:
                return None
            try:
                with sock:
                    send_frame(sock, header, payload)
                    reply, _ = recv_frame(sock)
                return reply
            except (ConnectionError, OSError) as exc:
                if time.monotonic() + pause > deadline:
                    raise TransientError(f"tantivy writer service for {self.index_dir.name!r}: {exc}") from exc
                time.sleep(pause)  # the old service is on its way out; the next connect finds a new one
                pause = min(pause * 2, 0.5)

    def bulk(
        self, items: Sequence[tuple[str, str, bytes]], wait: bool = True
    ) -> tuple[dict[str, list[str]], WriteMark]:
        """Send (id, op, body) items; return per-item errors and where they landed.

        With *wait*, the reply comes once the batch is committed; without, once it is applied
        (durable after a :meth:`sync` to the returned mark).
        """
        header = {"op": "bulk" if wait else "apply", "items": [[i, op, len(body)] for i, op, body in items]}
        reply = self.request(header, b"".join(body for _, _, body in items))
        if reply is None or not reply.get("ok"):
            raise TransientError(f"tantivy index {self.index_dir.name!r}: {reply and reply.get('error')}")
        errors: dict[str, list[str]] = reply["errors"]
        return errors, WriteMark(str(reply["epoch"]), int(reply["generation"]))

    def sync(self, mark: WriteMark) -> None:
        reply = self.request({"op": "sync", "epoch": mark.epoch, "generation": mark.generation})
        if reply is None:
            raise TransientError(f"tantivy index {self.index_dir.name!r}: no writer service")
        if reply.get("lost"):
            raise WritesLost(f"tantivy index {self.index_dir.name!r}: {reply.get('error')}")
        if not reply.get("ok"):
            raise TransientError(f"tantivy index {self.index_dir.name!r}: {reply.get('error')}")

    def finish(self) -> None:
        """Commit, merge and stop the service (starting one first if none runs, to do it)."""
        reply = self.request({"op": "finish"})
        if reply is None or not reply.get("ok"):
            raise TransientError(f"tantivy index {self.index_dir.name!r}: finish failed: {reply}")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Stop a running service and hold the directory's Tantivy writer lock (no service may
        start, and none still exiting may commit) until the block ends: the caller changes the
        directory's segments itself (adopting stages)."""
        with open(self.index_dir / SPAWN_LOCK, "a+b") as spawn:
            fcntl.flock(spawn, fcntl.LOCK_EX)
            try:
                reply = self.request({"op": "finish"}, start=False)
                if reply is not None and not reply.get("ok"):
                    raise TransientError(f"tantivy index {self.index_dir.name!r}: finish failed: {reply}")
                with open(self.index_dir / TANTIVY_WRITER_LOCK, "a+b") as writer:
                    self._lock_within(writer, self.start_timeout_s)
                    try:
                        yield
                    finally:
                        fcntl.flock(writer, fcntl.LOCK_UN)
            finally:
                fcntl.flock(spawn, fcntl.LOCK_UN)

    def _lock_within(self, fh: Any, timeout_s: float) -> None:
        """Take Tantivy's own writer lock (an flock, as tantivy takes it), waiting for a service
        that is still exiting to let go of it."""
        deadline = time.monotonic() + timeout_s
        pause = 0.01
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TransientError(
                        f"tantivy index {self.index_dir.name!r}: a writer still holds it after {timeout_s:.0f} s"
                    ) from None
                time.sleep(pause)  # a service on its way out: it releases the lock when it exits
                pause = min(pause * 2, 0.2)

    def stop_if_running(self) -> None:
        """Make a running service finish and exit (before its directory is deleted)."""
        self.request({"op": "finish"}, start=False)

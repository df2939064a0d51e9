"""A TCP forwarder that can black-hole the network: 127.0.0.1:<port> -> upstream.

A network partition is not a reset. When packets are dropped the client sees nothing at all: its
query neither answers nor fails, a new connection hangs, and when the network heals the connections
that survived carry on where they were (TCP retransmits what was lost). That is the case that finds
missing timeouts and lease bugs, and it is what ``cut(seconds)`` makes: for that long no byte moves in
either direction (what was sent waits in the kernel's socket buffers, as unacknowledged segments wait
in a real sender's), new connections are accepted but not connected upstream, and afterwards
everything flows again. ``reset()`` is the other fault, a dropped connection: every forwarded
connection is aborted with an RST at once.

Only the connections that go through the forwarder are hit, so a campaign can partition one process
from a server that others keep using.

One thread runs a poll loop over non-blocking sockets. Cut, heal and reset are handed to that thread,
and return once it has acted on them, so after ``cut()`` returns not one more byte is forwarded.
"""

from __future__ import annotations

import contextlib
import errno
import queue
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

CHUNK = 65536
MAX_BUFFERED = 1 << 20  # per direction: stop reading a side whose peer does not keep up
READ = select.POLLIN
WRITE = select.POLLOUT
TROUBLE = select.POLLERR | select.POLLHUP | select.POLLNVAL


@dataclass(eq=False)
class _Link:
    """One forwarded connection: the client's socket and ours to the upstream."""

    client: socket.socket
    upstream: socket.socket | None = None
    connecting: bool = False
    to_upstream: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    client_eof: bool = False  # the client sent FIN
    upstream_eof: bool = False
    upstream_shut: bool = False  # FIN passed on to the upstream
    client_shut: bool = False

    def sockets(self) -> list[socket.socket]:
        return [self.client] if self.upstream is None else [self.client, self.upstream]

    def finished(self) -> bool:
        return self.client_shut and self.upstream_shut


def _abort(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0): what a peer sees when a connection is dropped."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class NetCut:
    """Forward 127.0.0.1:<port> to upstream; ``cut(seconds)`` black-holes it, ``reset()`` drops every connection."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))  # bound now, so .port is known and stays ours
        self.port = int(self._listener.getsockname()[1])
        self._cut_until = 0.0  # time.monotonic() until which nothing moves
        self._links: list[_Link] = []
        self._commands: queue.Queue[tuple[str, threading.Event]] = queue.Queue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread: threading.Thread | None = None
        self.forwarded = 0  # bytes forwarded, both directions: lets a test see that traffic passed
        self.accepted = 0

    # -- the API ------------------------------------------------------------------------------------
    def start(self) -> Self:
        if self._thread is None:
            self._listener.listen(128)
            self._listener.setblocking(False)
            self._thread = threading.Thread(target=self._loop, name=f"netcut-{self.port}", daemon=True)
            self._thread.start()
        return self

    def cut(self, seconds: float) -> None:
        """Black-hole for that many seconds from now (extends a cut under way). Returns at once, with the
        cut in force."""
        self._cut_until = max(self._cut_until, time.monotonic() + seconds)
        self._command("sync")

    def heal(self) -> None:
        """End a cut now."""
        self._cut_until = 0.0
        self._command("sync")

    @property
    def cutting(self) -> bool:
        return time.monotonic() < self._cut_until

    def reset(self) -> None:
        """Drop every forwarded connection at once (an RST to both ends). New connections are served."""
        self._command("reset")

    @property
    def connections(self) -> int:
        """Connections currently forwarded (or held, during a cut)."""
        return len(self._links)

    def close(self) -> None:
        """Stop: the listener is closed and every connection dropped."""
        if self._thread is not None and self._thread.is_alive():
            self._command("close")
            self._thread.join(timeout=10)
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _command(self, name: str) -> None:
        """Hand a command to the loop and wait until it has been carried out."""
        if self._thread is None or not self._thread.is_alive():
            return  # not started (or closed): a cut is simply remembered for start()
        done = threading.Event()
        self._commands.put((name, done))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if not done.wait(10):
            raise RuntimeError(f"netcut {self.port}: the forwarding loop did not answer {name!r}")

    # -- the loop -----------------------------------------------------------------------------------
    def _loop(self) -> None:
        poller = select.poll()
        registered: dict[int, int] = {}
        by_fd: dict[int, tuple[_Link, socket.socket]] = {}
        poller.register(self._listener, READ)
        poller.register(self._wake_r, READ)
        try:
            while True:
                if not self._run_commands():
                    return
                now = time.monotonic()
                cut = now < self._cut_until
                wanted: dict[int, int] = {}
                by_fd.clear()
                if not cut:
                    for link in list(self._links):
                        if link.upstream is None:
                            self._connect(link)
                        for sock, mask in self._interest(link):
                            if mask:
                                wanted[sock.fileno()] = mask
                                by_fd[sock.fileno()] = (link, sock)
                for fd in list(registered):
                    if fd not in wanted:
                        with contextlib.suppress(KeyError, OSError):
                            poller.unregister(fd)
                        del registered[fd]
                for fd, mask in wanted.items():
                    if registered.get(fd) != mask:
                        if fd in registered:
                            poller.modify(fd, mask)
                        else:
                            poller.register(fd, mask)
                        registered[fd] = mask
                timeout_ms = max(1, int((self._cut_until - now) * 1000) + 1) if cut else None
                for fd, events in poller.poll(timeout_ms):
                    if fd == self._wake_r.fileno():
                        with contextlib.suppress(BlockingIOError):
                            self._wake_r.recv(4096)
                    elif fd == self._listener.fileno():
                        self._accept()
                    elif fd in by_fd and not self.cutting:  # a cut asked for meanwhile stops it here
                        link, sock = by_fd[fd]
                        if link in self._links:
                            self._handle(link, sock, events)
        finally:
            for link in self._links:
                for sock in link.sockets():
                    _abort(sock)
            self._links = []
            with contextlib.suppress(OSError):
                self._listener.close()

    def _run_commands(self) -> bool:
        while True:
            try:
                name, done = self._commands.get_nowait()
            except queue.Empty:
                return True
            if name == "reset":
                for link in self._links:
                    for sock in link.sockets():
                        _abort(sock)
                self._links = []
            done.set()
            if name == "close":
                return False

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # closed
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._links.append(_Link(client))
            self.accepted += 1

    def _connect(self, link: _Link) -> None:
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setblocking(False)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = upstream.connect_ex(self.upstream)
        link.upstream = upstream
        if code == 0:
            return
        if code in (errno.EINPROGRESS, errno.EAGAIN):
            link.connecting = True
            return
        self._drop(link)  # refused: the client sees its connection dropped

    @staticmethod
    def _interest(link: _Link) -> list[tuple[socket.socket, int]]:
        if link.upstream is None:
            return []
        if link.connecting:
            return [(link.upstream, WRITE)]
        client = (READ if not link.client_eof and len(link.to_upstream) < MAX_BUFFERED else 0) | (
            WRITE if link.to_client else 0
        )
        upstream = (READ if not link.upstream_eof and len(link.to_client) < MAX_BUFFERED else 0) | (
            WRITE if link.to_upstream else 0
        )
        return [(link.client, client), (link.upstream, upstream)]

    def _drop(self, link: _Link) -> None:
        for sock in link.sockets():
            _abort(sock)
        with contextlib.suppress(ValueError):
            self._links.remove(link)

    def _handle(self, link: _Link, sock: socket.socket, events: int) -> None:
        assert link.upstream is not None
        if link.connecting:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                self._drop(link)  # refused: the client sees its connection dropped
            else:
                link.connecting = False
            return
        from_client = sock is link.client
        peer = link.upstream if from_client else link.client
        inbox = link.to_upstream if from_client else link.to_client
        outbox = link.to_client if from_client else link.to_upstream
        eof = link.client_eof if from_client else link.upstream_eof
        progressed = False
        try:
            if events & (READ | TROUBLE) and not eof:
                data = sock.recv(CHUNK)
                progressed = True
                if data:
                    inbox += data
                elif from_client:
                    link.client_eof = True
                else:
                    link.upstream_eof = True
            if events & WRITE and outbox:
                sent = sock.send(outbox)
                del outbox[:sent]
                self.forwarded += sent
                progressed = True
            if inbox:
                # Pass it on now if the peer can take it: saves a round of the loop per message.
                sent = peer.send(inbox)
                del inbox[:sent]
                self.forwarded += sent
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(link)  # reset or broken on one side: drop the other side too, as the network would
            return
        if events & (select.POLLERR | select.POLLNVAL) or (events & select.POLLHUP and not progressed):
            self._drop(link)  # nothing more can move on this socket
            return
        # Half-closes: pass a FIN on once everything before it has been delivered.
        try:
            if link.client_eof and not link.to_upstream and not link.upstream_shut:
                link.upstream.shutdown(socket.SHUT_WR)
                link.upstream_shut = True
            if link.upstream_eof and not link.to_client and not link.client_shut:
                link.client.shutdown(socket.SHUT_WR)
                link.client_shut = True
        except OSError:
            self._drop(link)
            return
        if link.finished():
            for s in link.sockets():
                s.close()
            self._links.remove(link)

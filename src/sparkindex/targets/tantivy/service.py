"""The writer service: the one process that writes a Tantivy index version.

Tantivy allows one ``IndexWriter`` per directory, and opening one, committing and waiting for its
merges per batch under a cross-process lock serialised every Spark task behind the others. So each
index version gets one long-lived writer process instead. Tasks send it batches over a local
socket; it applies them (delete-then-add by ``_id``: an upsert, so a redone batch never
duplicates), commits several clients' batches together (group commit) and answers each client only
after the commit that made its batch durable. A task moves its cursor on that answer, so a crash
of the service loses nothing that was acknowledged.

The first client that finds no service starts one (see :mod:`.writer`); the service exits after
``idle_s`` without requests, or when asked to ``finish`` (commit, merge, collect garbage).

    python -m sparkindex.targets.tantivy.service INDEX_DIR HEAP_MB THREADS IDLE_S
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import tantivy

from sparkindex.allocator import tune_allocator
from sparkindex.targets.tantivy.errors import writer_failed
from sparkindex.targets.tantivy.schema import build_schema
from sparkindex.targets.tantivy.wire import GROUP_WAIT_S, recv_frame, send_frame, service_address

log = logging.getLogger("sparkindex.tantivy.service")

MAPPING_FILE = "sparkindex-mapping.json"
#: Commit as soon as this many documents wait, when a client asks for durability (``sync``, or a
#: ``bulk`` that waits for it), or when the oldest uncommitted document has waited GROUP_WAIT_S.
#: Every commit flushes segments that merges must later rewrite: on the large-document benchmark
#: committing every 25,000 documents instead of every 5,000 cut Tantivy's CPU by about 30 %, so
#: tasks apply batches without waiting (``apply``) and ask for durability only now and then.
GROUP_DOCS = 50_000
#: A ``bulk`` (apply and wait) gathers other clients' batches for this long before committing.
BULK_WAIT_S = 0.02


class WriterService:
    def __init__(self, index_dir: Path, heap_mb: int, threads: int, idle_s: float) -> None:
        self.index_dir = index_dir
        self.idle_s = idle_s
        mapping = orjson.loads((index_dir / MAPPING_FILE).read_bytes())
        schema, _ = build_schema(mapping)
        self.index = tantivy.Index(schema, path=str(index_dir), reuse=True)
        self.writer = self._open_writer(heap_mb, threads)
        self.lock = threading.Lock()  # the IndexWriter is used by one thread at a time
        self.changed = threading.Condition()
        self.pending = 0  # documents applied but not yet committed
        self.pending_since = 0.0
        self.generation = 0  # bumped by every commit
        self.commit_error: str | None = None
        self.uncommitted: list[tuple[str, str, memoryview]] = []  # replayed if a rejected item forces a rollback
        self.last_request = time.monotonic()
        self.done = threading.Event()
        self.listener: socket.socket | None = None
        self.epoch = f"{os.getpid()}-{time.time_ns()}"  # another epoch: uncommitted writes were lost
        self.urgent_at: float | None = None  # when a waiting client wants the next commit

    def _open_writer(self, heap_mb: int, threads: int) -> Any:
        # A service killed a moment ago may still hold Tantivy's directory lock for a few ms.
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.index.writer(heap_mb * 1024 * 1024, threads)
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # -- requests ----------------------------------------------------------------------------------
    def apply(self, items: list[list[Any]], payload: bytes) -> tuple[dict[str, list[str]], int]:
        """Apply a batch; return per-item errors and the generation whose commit makes it durable."""
        errors: dict[str, list[str]] = {}
        offset = 0
        view = memoryview(payload)  # slices share the request's buffer; nothing is copied twice
        with self.lock:
            for i, (doc_id, op, size) in enumerate(items):
                if self.done.is_set():
                    raise ConnectionError("the writer service is shutting down")
                body = view[offset : offset + size]
                offset += size
                self.writer.delete_documents_by_term("_id", doc_id)
                if op != "delete":
                    try:
                        self.writer.add_json(str(body, "utf-8"))
                    except ValueError as exc:
                        if writer_failed(exc):
                            # the writer is dead (a full disk, an I/O error), not the document:
                            # nothing since the last commit is durable, so this epoch ends and
                            # every client redoes its batches; no document is written off
                            self._end_epoch(f"tantivy writer failed: {exc}")
                            return {}, self.generation + 1  # never committed: a bulk's wait reports it
                        errors[str(i)] = ["MappingRejected", str(exc)]  # it does not fit the mapping
                        self._undo_failed_upsert()
                        continue
                self.uncommitted.append((doc_id, op, body))
            with self.changed:
                if not items:
                    return errors, self.generation  # nothing to make durable
                if self.pending == 0:
                    self.pending_since = time.monotonic()
                self.pending += len(items)
                target = self.generation + 1
                self.changed.notify_all()
        return errors, target

    def _upsert(self, doc_id: str, op: str, body: memoryview) -> None:
        self.writer.delete_documents_by_term("_id", doc_id)
        if op != "delete":
            self.writer.add_json(str(body, "utf-8"))
        self.uncommitted.append((doc_id, op, body))

    def _undo_failed_upsert(self) -> None:
        """A rejected document must not take the live one with it: its delete already happened, so
        roll back to the last commit and replay everything since, without the rejected item.

        If the replay itself fails, the writer is unusable: this epoch ends (no later commit may
        claim to cover writes it no longer holds) and every client redoes its unsynced batches.
        """
        replay, self.uncommitted = self.uncommitted, []
        try:
            self.writer.rollback()
            for doc_id, op, body in replay:
                self._upsert(doc_id, op, body)
        except (ValueError, OSError) as exc:
            self._end_epoch(f"tantivy writer failed while undoing a rejected document: {exc}")
            raise

    def _end_epoch(self, error: str) -> None:
        log.error("%s", error)
        with self.changed:
            self.commit_error = error
            self.changed.notify_all()
        self.done.set()

    def wait_durable(self, generation: int, within_s: float) -> str | None:
        """Block until *generation* is committed, asking for a commit within *within_s*."""
        with self.changed:
            if self.generation < generation:
                due = time.monotonic() + within_s
                self.urgent_at = due if self.urgent_at is None else min(self.urgent_at, due)
                self.changed.notify_all()
            while self.generation < generation and self.commit_error is None:
                self.changed.wait()
            return self.commit_error

    def commit(self) -> None:
        with self.lock:
            try:
                self.writer.commit()
            except (ValueError, OSError) as exc:
                # Nothing after the last good commit is acknowledged; clients redo their batches.
                self._end_epoch(f"tantivy commit failed: {exc}")
                return
            self.uncommitted = []
            with self.changed:
                self.generation += 1
                self.pending = 0
                self.changed.notify_all()

    def committer(self) -> None:
        while not self.done.is_set():
            with self.changed:
                while self.pending == 0 and not self.done.is_set():
                    self.changed.wait(timeout=0.5)
                if self.done.is_set():
                    return
                while self.pending < GROUP_DOCS:
                    due = self.pending_since + GROUP_WAIT_S
                    if self.urgent_at is not None:
                        due = min(due, self.urgent_at)
                    left = due - time.monotonic()
                    if left <= 0:
                        break
                    self.changed.wait(timeout=left)
                self.urgent_at = None
            self.commit()

    def stop_accepting(self) -> None:
        """Release the address before the last work, so that a client arriving now is refused at
        once (and starts a new service) instead of being reset by one that is about to exit."""
        listener, self.listener = self.listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()

    def finish(self) -> str | None:
        """Commit, let merges finish and drop files no segment uses: the index is ready to serve.
        Returns an error instead of raising, and the service ends either way."""
        self.stop_accepting()
        try:
            with self.lock:
                self.writer.commit()
                self.uncommitted = []
                with self.changed:
                    self.generation += 1
                    self.pending = 0
                    self.changed.notify_all()
                self.writer.garbage_collect_files()
                self.writer.wait_merging_threads()
        except (ValueError, OSError) as exc:
            self._end_epoch(f"tantivy finish failed: {exc}")
            return str(exc)
        finally:
            self.done.set()
        return None

    def serve_client(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    header, payload = recv_frame(conn)
                except (ConnectionError, OSError):
                    return
                self.last_request = time.monotonic()
                op = header.get("op")
                if op in ("bulk", "apply"):
                    errors, generation = self.apply(header["items"], payload)
                    # an apply answers at once, unless its batch ended the epoch (a dead writer)
                    failure = self.wait_durable(generation, BULK_WAIT_S) if op == "bulk" else self.commit_error
                    reply: dict[str, Any] = {
                        "ok": failure is None,
                        "errors": errors,
                        "error": failure,
                        "epoch": self.epoch,
                        "generation": generation,
                    }
                elif op == "sync":
                    if header.get("epoch") != self.epoch:
                        lost = "the writer restarted; uncommitted writes are lost"
                        reply = {"ok": False, "lost": True, "error": lost}
                    else:
                        failure = self.wait_durable(int(header["generation"]), 0.0)
                        reply = {"ok": failure is None, "error": failure}
                elif op == "finish":
                    failure = self.finish()
                    reply = {"ok": failure is None, "error": failure}
                elif op == "ping":
                    reply = {"ok": True, "pid": os.getpid()}
                else:
                    reply = {"ok": False, "error": f"unknown op {op!r}"}
                try:
                    send_frame(conn, reply)
                except OSError:
                    return
                if self.done.is_set():
                    return

    # -- lifetime ----------------------------------------------------------------------------------
    def run(self, listener: socket.socket) -> None:
        self.listener = listener
        threading.Thread(target=self.committer, name="committer", daemon=True).start()
        listener.settimeout(0.1)  # how soon an idle service notices it is idle
        while not self.done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                with self.changed:
                    idle = self.pending == 0 and time.monotonic() - self.last_request > self.idle_s
                if idle and threading.active_count() <= 2:  # main + committer: no client connected
                    self.stop_accepting()
                    with self.lock:
                        self.writer.commit()
                        self.writer.wait_merging_threads()
                    self.done.set()
                continue
            except OSError:  # the listener was shut down by finish()
                break
            conn.settimeout(None)
            threading.Thread(target=self.serve_client, args=(conn,), daemon=True).start()
        self.done.wait()
        self.stop_accepting()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    index_dir, heap_mb, threads, idle_s = Path(argv[0]), int(argv[1]), int(argv[2]), float(argv[3])
    tune_allocator()  # the writer's indexing arenas come and go with every segment it flushes
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(service_address(index_dir))
    except OSError:
        return 0  # another service for this index won the race; clients will use that one
    service = WriterService(index_dir, heap_mb, threads, idle_s)
    listener.listen(64)
    service.run(listener)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

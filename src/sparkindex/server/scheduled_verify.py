"""The periodic consistency check (``verify: {every: 24h}``) as ``serve`` runs it.

The check itself, its "is it due" rule (the last *scheduled* run of each alias, recorded in the
store) and its lock (one process at a time, whether ``serve`` or ``sync`` asks) are reached
through :func:`sparkindex.api.verify_due_at` and :func:`sparkindex.api.scheduled_verify`. The
server only decides when to look, and runs the check as a subprocess,
``python -m sparkindex.server.scheduled_verify -c pipeline.yaml``, so Spark never starts inside
the server. The subprocess prints one JSON object: the outcome, or why it skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time

import orjson
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from sparkindex import api
from sparkindex.config.secrets import error_line, redact_url
from sparkindex.server.state import ServerState

log = logging.getLogger(__name__)
LOOK_EVERY_S = 300.0  # how often the server looks whether the check is due
RETRY_BUSY_S = 60.0  # a due check that found a job running looks again this soon


def module_command() -> list[str]:
    return [sys.executable, "-m", "sparkindex.server.scheduled_verify"]


async def schedule(state: ServerState) -> None:
    """Look whether the check is due; when it is and nothing else runs, start it."""
    if not state.pipeline.verify.every:
        return
    while True:
        try:
            due = await run_in_threadpool(api.verify_due_at, state.pipeline)
        except (SQLAlchemyError, api.SparkIndexError) as exc:
            log.warning("scheduled verify: could not read when it is due (%s); looking again later", error_line(exc))
            await asyncio.sleep(LOOK_EVERY_S)
            continue
        now = time.time()
        if due is None:
            return
        if due > now:
            await asyncio.sleep(min(due - now, LOOK_EVERY_S))
            continue
        busy = [a for a in state.actions.running() if a.kind in ("verify", "repair", "reindex")]
        try:
            live = await run_in_threadpool(state.views.active_jobs)
        except (SQLAlchemyError, api.SparkIndexError) as exc:  # the store down: the schedule must outlive it
            log.warning("scheduled verify: could not read the running jobs (%s); looking again later", error_line(exc))
            await asyncio.sleep(LOOK_EVERY_S)
            continue
        if busy or live:
            log.info("scheduled verify waits: %s", "a job is running" if live else f"action {busy[0].id} runs")
            await asyncio.sleep(RETRY_BUSY_S)
            continue
        action = await state.actions.start(
            "verify", ["-c", str(state.config_path)], program=module_command(), trigger="scheduled"
        )
        await action.finished.wait()
        if action.exit_code not in (0, 1):
            await asyncio.sleep(LOOK_EVERY_S)  # a failing check (source down) is not retried in a loop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkindex.server.scheduled_verify")
    parser.add_argument("-c", "--config", required=True)
    args = parser.parse_args(argv)
    try:
        result = api.scheduled_verify(api.load(args.config))
    except api.SparkIndexError as exc:
        # the server shows this process's stderr as the action's output: plain text, no markup
        sys.stderr.write(f"error: {redact_url(str(exc))}\n")
        return exc.exit_code
    if result is None:
        sys.stdout.write(orjson.dumps({"skipped": "not due, or another process runs the check"}).decode() + "\n")
        return 0
    sys.stdout.write(orjson.dumps(result.report).decode() + "\n")
    return result.outcome.exit_code


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())

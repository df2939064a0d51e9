"""The one progress protocol: its order (started, then phases and tallies, then finished exactly
once, however the call ends), the adapters from each job's own callbacks, a progress that raises,
the CLI's Rich bars as one implementation, and the sync's stop token."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from sparkindex import api
from sparkindex.api.progress import watching
from sparkindex.cli.bars import RichBars
from sparkindex.coordination.records import EntityStats


class Recorder(api.NoProgress):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def started(self, call: api.CallName, aliases: Sequence[str]) -> None:
        self.events.append(("started", (call, tuple(aliases))))

    def phase(self, text: str) -> None:
        self.events.append(("phase", text))

    def advanced(self, tally: api.Tally) -> None:
        self.events.append(("advanced", tally))

    def finished(self, outcome: api.Outcome) -> None:
        self.events.append(("finished", outcome))


def test_a_call_is_started_then_advanced_then_finished_with_its_outcome() -> None:
    seen = Recorder()
    with watching(seen, "verify", ["products"]) as watch:
        listener = watch.verify_listener()  # verify's own callbacks, as the verifier calls them
        listener.phase("planning key ranges")
        listener.ranges("verifying (source ranges)", 3, 8)
        watch.done(api.CheckResult(api.Outcome.DONE_WITH_ERRORS, True, (), 1))
    assert seen.events == [
        ("started", ("verify", ("products",))),
        ("phase", "planning key ranges"),
        ("advanced", api.Tally("verifying (source ranges)", "ranges", 3, 8)),
        ("finished", api.Outcome.DONE_WITH_ERRORS),
    ]


@pytest.mark.parametrize(("raised", "outcome"), [(RuntimeError("boom"), "FAILED"), (KeyboardInterrupt(), "STOPPED")])
def test_finished_comes_once_when_the_call_raises(raised: BaseException, outcome: str) -> None:
    seen = Recorder()
    with pytest.raises(type(raised)), watching(seen, "reindex", ["a"]):
        raise raised
    assert [e for e, _ in seen.events] == ["started", "finished"]
    assert seen.events[-1] == ("finished", api.Outcome(outcome))


def test_the_reindex_stats_become_one_tally_per_entity() -> None:
    seen = Recorder()
    with watching(seen, "reindex", ["products", "users"]) as watch:
        watch.reindex_listener().stats(
            {
                "products": EntityStats("products", 0, 40, 38, 2, {"PROCESSING": 1, "COMPLETED": 3}),
                "users": EntityStats("users", 100, 10, 10, 0, {"PENDING": 2}),
            }
        )
    tallies = [t for e, t in seen.events if e == "advanced"]
    assert tallies == [
        # a total the planner has not counted yet is never below what was done
        api.Tally("products", "documents", 40, 40, 2, "completed 3, processing 1"),
        api.Tally("users", "documents", 10, 100, 0, "pending 2"),
    ]


def test_a_progress_that_raises_is_logged_once_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Recorder):
        def advanced(self, tally: api.Tally) -> None:
            raise ValueError("a display's bug")

    seen = Broken()
    with caplog.at_level(logging.ERROR, "sparkindex.api"), watching(seen, "redrive", ["a"]) as watch:
        count = watch.counter("dead letters", "letters")
        count(1, 3)
        count(2, 3)  # not called again, not logged again
        watch.phase("after the failure")
    assert [r.getMessage() for r in caplog.records] == [
        "progress.advanced raised; no more progress is reported for this call"
    ]
    assert [e for e, _ in seen.events] == ["started"], "nothing more reaches a progress that failed"


def test_without_a_progress_phases_go_to_the_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "sparkindex.api"), watching(None, "sync", ["a"]) as watch:
        watch.phase("planning")
        watch.warn("preflight: WARN target.version: old")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "planning"),
        ("WARNING", "preflight: WARN target.version: old"),
    ]


def test_the_cli_bars_are_a_progress_with_one_bar_per_task() -> None:
    bars: api.Progress = RichBars(enabled=False)
    assert isinstance(bars, RichBars)
    bars.started("reindex", ["products"])
    bars.advanced(api.Tally("products", "documents", 10, 0))
    bars.advanced(api.Tally("products", "documents", 30, 50, detail="completed 1"))
    bars.advanced(api.Tally("sync default", "changes", 7, None))
    bars.finished(api.Outcome.DONE)
    tasks = {t.description: t for t in bars.progress.tasks}
    assert set(tasks) == {"products", "sync default"}
    products = tasks["products"]
    assert (products.completed, products.total, products.fields["detail"]) == (30, 50, "completed 1")
    assert (tasks["sync default"].completed, tasks["sync default"].total) == (7, None), "a stream has no total"


def test_a_stop_token_reaches_the_run_whenever_it_is_set() -> None:
    asked: list[str] = []
    early = api.StopToken()
    early.set()  # before the run started: it stops at its first chance
    early._attach(lambda: asked.append("early"))
    late = api.StopToken()
    late._attach(lambda: asked.append("late"))
    assert asked == ["early"] and not late.is_set()
    late.set()
    assert asked == ["early", "late"] and late.is_set()

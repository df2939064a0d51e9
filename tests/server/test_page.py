"""The web page in a real headless Chromium (Debian's package): the page's own button starts a
reindex (asking for the token), the job's live view shows its bar move and the job reach
COMPLETED, and screenshots are saved (SPARKINDEX_SCREENSHOTS=<dir> keeps copies)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkindex.resources import open_store
from tests.e2e.shop import make_shop, wait_for
from tests.server.browser import CHROMIUM, Chromium
from tests.server.conftest import TOKEN, ServerProcess
from tests.server.source_gate import ENDED, SourceGate, in_store
from tests.server.store_fixture import ERROR, Populated

pytestmark = pytest.mark.slow
PRODUCTS = 20_000
PARTITIONS = 20

LIVE_VIEW = """(() => {
  const bar = document.querySelector('[data-entity="products"]');
  const cells = [...document.querySelectorAll('#grid .cell')];
  return {
    view: document.getElementById('job-view').hidden ? 'jobs' : 'job',
    status: document.getElementById('job-status').textContent,
    processed: bar ? Number(bar.dataset.processed) : null,
    total: bar ? Number(bar.dataset.total) : null,
    width: bar ? bar.querySelector('.fill').style.width : null,
    rate: bar ? bar.querySelector('.rate').textContent : null,
    eta: bar ? bar.querySelector('.eta').textContent : null,
    cells: cells.map((c) => c.dataset.state),
    titles: cells.map((c) => c.title),
    points: Number(document.getElementById('chart').dataset.points || 0),
  };
})()"""


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)")
    chromium = Chromium(tmp_path)
    yield chromium
    chromium.close()


def keep(path: Path) -> None:
    target = os.environ.get("SPARKINDEX_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)


def test_page_starts_a_reindex_and_shows_it_live_until_completed(
    tmp_path: Path, start_server: Callable[..., ServerProcess], browser: Chromium
) -> None:
    pipeline = make_shop(
        tmp_path / "shop", PRODUCTS, PRODUCTS // PARTITIONS, batch_size=250, page_size=250, sync_every_s=0.5
    )
    server = start_server(tmp_path / "shop" / "pipeline.yaml")
    browser.navigate(server.url + "/")
    wait_for(lambda: browser.evaluate("document.getElementById('conn').textContent") == "live", 60, "the live socket")
    wait_for(lambda: browser.evaluate("document.getElementById('jobs').dataset.loaded") == "1", 60, "the job list")
    assert browser.evaluate("document.getElementById('jobs-empty').hidden") is False, "no job yet"

    # The page's button; the page asks for the token with a prompt, answered here.
    click = browser.send("Runtime.evaluate", {"expression": "document.getElementById('start-reindex').click()"})
    dialog = browser.wait_event("Page.javascriptDialogOpening", 30)
    assert dialog["type"] == "prompt" and "token" in dialog["message"]
    browser.call("Page.handleJavaScriptDialog", {"accept": True, "promptText": TOKEN})
    browser.reply(click)

    # The page changes only on a 2 s push, and a fast machine can index the 20,000 rows within a
    # few. So the test holds the source (see SourceGate) twice, each time until the page has shown
    # the run part-way: once as soon as the store shows progress, with partitions in flight, and
    # once at 30 % or more: two bars between empty and full on any machine, whatever its speed.
    seen: list[dict[str, Any]] = []
    shots: dict[str, Path] = {}
    gate = SourceGate(tmp_path / "shop" / "shop.db")
    store = open_store(pipeline)  # closed in the finally below, with the gate
    ended_well_at: list[float] = []  # when the reindex was first seen ended with exit code 0

    def reindex_alive() -> None:
        """Fail at once when the reindex (or its job) ended otherwise than well; and when it ended
        well, the page has a minute to show it."""
        actions = server.get("/api/actions")["actions"]
        finished = [a for a in actions if a["kind"] == "reindex" and a["state"] == "finished"]
        if finished:
            assert finished[0]["exit_code"] == 0, f"the reindex failed: {finished[0]['stderr_tail']}"
            ended_well_at.append(time.monotonic())
            assert ended_well_at[-1] - ended_well_at[0] < 60, "the reindex ended; the page did not show it"

    def hold_when(at_least: int) -> None:
        """Hold the source once the store shows *at_least* rows processed and partitions pending."""

        def due() -> bool:
            status, processed, partitions = in_store(store)
            assert status not in ENDED, f"the job ended ({status}) before the test could hold it part-way"
            if status is None:
                reindex_alive()
            return processed >= at_least and bool(partitions.get("PENDING"))

        wait_for(due, 300, f"{at_least} rows processed with partitions pending", every=0.02)
        gate.hold()

    def look() -> dict[str, Any]:
        state: dict[str, Any] = browser.evaluate(LIVE_VIEW)
        seen.append(state)
        assert state["status"] not in ENDED or state["status"] == "COMPLETED", f"the job ended: {state}"
        share = (state["processed"] or 0) / (state["total"] or 1)
        if 0.3 <= share <= 0.8 and "mid" not in shots:  # a picture of the bars half-way
            shots["mid"] = browser.screenshot(tmp_path / "sparkindex-page-running.png")
        reindex_alive()
        return state

    def in_flight() -> bool:  # part-way, with a partition claimed (its next read waits while held)
        s = look()
        return s["status"] == "RUNNING" and 0 < (s["processed"] or 0) < PRODUCTS and "PROCESSING" in s["cells"]

    def further_on(first: int) -> bool:  # part-way again, at 30 % or more and past the first bar
        s = look()
        return s["status"] == "RUNNING" and max(first + 1, 0.3 * PRODUCTS) <= (s["processed"] or 0) < PRODUCTS

    try:
        hold_when(1)
        wait_for(
            lambda: browser.evaluate("document.querySelectorAll('#jobs tr[data-job]').length") == 1, 120, "the job row"
        )
        browser.evaluate("document.querySelector('#jobs tr[data-job]').click()")
        wait_for(in_flight, 120, "the page to show the held run part-way, a partition in flight", every=0.25)
        first = seen[-1]["processed"]
        gate.release()
        hold_when(max(int(0.3 * PRODUCTS), first + 1))
        wait_for(lambda: further_on(first), 120, "the page to show the held run further on", every=0.25)
        gate.release()

        def completed() -> bool:
            state = look()
            return bool(state["status"] == "COMPLETED" and state["processed"] == state["total"])

        wait_for(completed, 600, "the page to show the job COMPLETED", every=0.25)
    finally:
        gate.close()
        store.close()
    final = seen[-1]
    shots["done"] = browser.screenshot(tmp_path / "sparkindex-page-completed.png")
    browser.evaluate("location.hash = '#/'")
    wait_for(lambda: browser.evaluate("document.getElementById('job-view').hidden") is True, 30, "the job list")
    wait_for(
        lambda: browser.evaluate("document.querySelector('#jobs tr[data-job] .badge').textContent") == "COMPLETED",
        30,
        "the list to show the job COMPLETED",
    )
    shots["list"] = browser.screenshot(tmp_path / "sparkindex-page-jobs.png")
    for path in shots.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000, path
        keep(path)

    assert final["view"] == "job" and final["total"] == PRODUCTS and final["width"] == "100%"
    assert final["cells"] == ["COMPLETED"] * PARTITIONS, "one grid cell per partition, all completed"
    assert all("owner:" in t or "COMPLETED" in t for t in final["titles"])
    assert final["points"] >= 2, "the docs/s chart has data"
    moving = [s for s in seen if s["processed"] is not None and 0 < s["processed"] < PRODUCTS]
    assert moving, "the bar was seen between empty and full"
    widths = sorted({float(s["width"].rstrip("%")) for s in seen if s["width"]})
    assert len(widths) >= 3 and widths[0] < 100 and widths[-1] == 100, f"the bar moved: {widths}"
    unknown = "\u2013"  # what the page shows for a figure it does not have yet
    assert any(s["rate"] != f"{unknown} docs/s" for s in moving) and any(s["eta"] != f"ETA {unknown}" for s in moving)
    assert any("PROCESSING" in s["cells"] for s in seen), "partitions seen in flight"
    assert any("owner:" in t for s in seen for t in s["titles"]), "the owner shows on hover"

    with open_store(pipeline) as store:
        job = store.job_rows.jobs(["products"])[0]
    assert job.status == "COMPLETED"
    actions = server.get("/api/actions")["actions"]
    assert len(actions) == 1 and actions[0]["kind"] == "reindex"
    assert browser.console_errors() == [], "the page runs without errors (nothing blocked by its policy)"


def test_job_view_shows_errors_as_text_filters_dead_letters_and_stops(
    server: ServerProcess, populated: Populated, browser: Chromium, tmp_path: Path
) -> None:
    browser.navigate(f"{server.url}/#/jobs/{populated.running_job}")
    wait_for(lambda: browser.evaluate("document.querySelectorAll('#grid .cell').length") == 4, 60, "the grid")
    errors = browser.evaluate("[...document.querySelectorAll('#partition-errors li')].map((li) => li.textContent)")
    assert errors == [f"products #2 (pending, retries 1): {ERROR}"]
    assert browser.evaluate("document.querySelectorAll('#partition-errors b, #grid b').length") == 0, "text, not markup"
    rows = "document.querySelectorAll('#dead-letters tbody tr').length"
    assert browser.evaluate(rows) == 3 and browser.evaluate("document.getElementById('redrive').disabled") is False

    browser.evaluate(
        "(() => { const s = document.getElementById('dl-class'); s.value = 'MapperParsingError';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    wait_for(lambda: browser.evaluate(rows) == 2, 30, "the dead letters filtered by error class")

    click = browser.send("Runtime.evaluate", {"expression": "document.getElementById('stop').click()"})
    confirm = browser.wait_event("Page.javascriptDialogOpening", 30)
    assert confirm["type"] == "confirm"
    browser.call("Page.handleJavaScriptDialog", {"accept": True})
    prompt = browser.wait_event("Page.javascriptDialogOpening", 30)
    assert prompt["type"] == "prompt"
    browser.call("Page.handleJavaScriptDialog", {"accept": True, "promptText": TOKEN})
    browser.reply(click)

    def stopping() -> bool:
        return bool(populated.store.job_rows.job(populated.running_job).status == "STOPPING")

    wait_for(stopping, 30, "the job to be STOPPING")
    wait_for(lambda: browser.evaluate("document.getElementById('job-status').textContent") == "STOPPING", 30, "badge")
    assert browser.evaluate("document.getElementById('stop').disabled") is True
    keep(browser.screenshot(tmp_path / "sparkindex-page-errors.png"))
    assert browser.console_errors() == []

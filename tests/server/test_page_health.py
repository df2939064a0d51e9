"""The page's health sections in a real headless Chromium: a failing preflight check with its fix,
a sync gap and how it was reconciled, and the alias's last verify with its drift; all three made
for real on one pipeline (see health_fixture), shown as text (never markup), with a screenshot
(SPARKINDEX_SCREENSHOTS=<dir> keeps it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.shop import wait_for
from tests.server import health_fixture as hf
from tests.server.browser import CHROMIUM, Chromium
from tests.server.conftest import ServerProcess
from tests.server.test_page import keep

pytestmark = pytest.mark.slow

SECTIONS = """(() => {
  const rows = (id) => [...document.querySelectorAll('#' + id + ' tbody tr')].map((tr) => ({
    data: { ...tr.dataset },
    cells: [...tr.querySelectorAll('td')].map((td) => td.textContent),
  }));
  return {
    checks: rows('checks'),
    checksSummary: document.getElementById('checks-summary').textContent,
    gaps: rows('gaps'),
    verified: rows('verified'),
    markup: document.querySelectorAll('#checks b, #gaps b, #verified b').length,
  };
})()"""


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)")
    chromium = Chromium(tmp_path)
    yield chromium
    chromium.close()


def test_page_shows_a_failing_check_a_reconciled_gap_and_the_last_verify_with_drift(
    tmp_path: Path, spark: Any, start_server: Callable[..., ServerProcess], browser: Chromium
) -> None:
    pipeline = hf.polling_shop(tmp_path / "shop")
    hf.reindex(pipeline, spark)
    hf.changes_the_log_never_delivers(pipeline)
    summary = hf.reconciled_gap(pipeline, spark, "audit")
    planted = hf.drift_behind_the_index(pipeline)
    assert not hf.verify_in_process(pipeline).clean
    hf.break_a_table(pipeline)
    server = start_server(tmp_path / "shop" / "pipeline.yaml")

    browser.navigate(server.url + "/")
    seen: dict[str, Any] = {}

    def shown() -> bool:
        seen.update(browser.evaluate(SECTIONS))
        return bool(seen["checks"] and seen["gaps"] and seen["verified"] and seen["verified"][0]["data"].get("status"))

    try:
        wait_for(shown, 120, "the three health sections to fill", every=0.25)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the page showed {seen}; console: {browser.console_errors()}") from None

    failing = [r for r in seen["checks"] if r["data"]["status"] == "FAIL"]
    select = next(r for r in failing if r["data"]["name"] == "source.select:reviews")
    status, name, detail, fix = select["cells"]
    assert (status, name) == ("FAIL", "source.select:reviews")
    assert "table 'reviews' not found in the source" in detail and "create the table" in fix
    assert "FAIL" in seen["checksSummary"] and str(len(failing)) in seen["checksSummary"]
    assert any(r["data"]["status"] == "OK" for r in seen["checks"]), "passing checks are listed too"

    [gap] = seen["gaps"]
    assert (gap["data"]["group"], gap["data"]["alias"], gap["data"]["outcome"]) == ("audit", "products", "reconciled")
    group, alias, found, reason, outcome = gap["cells"]
    assert (group, alias) == ("audit", "products") and found != "\u2013"  # a time, not the page's dash
    assert "holds no offset" in reason
    found_counts = summary.reconciled["products"]
    assert outcome.startswith("reconciled") and all(f"{k} {n}" in outcome for k, n in found_counts.items()), outcome

    [row] = seen["verified"]
    assert (row["data"]["alias"], row["data"]["status"]) == ("products", "drift")
    text = " ".join(row["cells"])
    for kind in ("missing", "extra", "stale"):
        assert f"{kind} 1" in text, text
        assert planted[kind] in text, f"the {kind} document's id is named: {text}"
    assert "duplicates 0" in text and row["cells"][0] == "products"
    assert seen["markup"] == 0

    # passing lines are folded away until asked for
    visible_ok = "[...document.querySelectorAll('#checks tr[data-status=\"OK\"]')].filter((tr) => !tr.hidden).length"
    assert browser.evaluate(visible_ok) == 0
    browser.evaluate("document.getElementById('checks-ok').click()")
    assert browser.evaluate(visible_ok) == sum(1 for r in seen["checks"] if r["data"]["status"] == "OK")
    browser.evaluate("document.getElementById('checks-ok').click()")

    # the check again, on demand: the table mended, its line passes (the polling columns' missing
    # indexes stay warnings); broken again, the FAIL line and its fix are back, for the picture
    reviews = "document.querySelector('#checks tr[data-name=\"source.select:reviews\"]').dataset.status"
    hf.mend_the_table(pipeline)
    browser.evaluate("document.getElementById('check-again').click()")
    wait_for(lambda: browser.evaluate(reviews) == "OK", 120, "the re-run check to pass", every=0.25)
    assert browser.evaluate("document.getElementById('checks').dataset.status") == "WARN"
    hf.break_a_table(pipeline)
    browser.evaluate("document.getElementById('check-again').click()")
    wait_for(lambda: browser.evaluate(reviews) == "FAIL", 120, "the re-run check to fail again", every=0.25)
    shot = browser.screenshot(tmp_path / "sparkindex-page-health.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    keep(shot)
    assert browser.console_errors() == []

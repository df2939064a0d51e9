"""Every command as a call of ``sparkindex.api``, on the demo shop (SQLite) into an embedded
Tantivy index: explain, dead letters and their re-drive, gc, search, stop, init; the progress
each job call reports through the one protocol; and the preflight that the job calls run first."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sparkindex import api
from sparkindex.jobs.explain import explain as explain_index
from sparkindex.resources import open_store
from tests.e2e.shop import make_shop

PRODUCTS = 120


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

    def tallies(self) -> list[api.Tally]:
        return [t for e, t in self.events if e == "advanced"]


@pytest.mark.slow
def test_the_commands_as_calls_on_one_shop(tmp_path: Path, spark: Any) -> None:
    pipeline = make_shop(tmp_path, PRODUCTS, partition_size=50)
    config = tmp_path / "pipeline.yaml"

    built = Recorder()
    result = api.reindex(config, spark=spark, progress=built)
    assert (result.outcome, result.indexed) == (api.Outcome.DONE, PRODUCTS)
    assert built.events[0] == ("started", ("reindex", ("products",)))
    assert built.events[-1] == ("finished", api.Outcome.DONE)
    assert [e for e, _ in built.events].count("finished") == 1
    assert "planning partitions" in [t for e, t in built.events if e == "phase"]
    last = built.tallies()[-1]
    assert (last.task, last.unit, last.done, last.total, last.failed) == (
        "products",
        "documents",
        PRODUCTS,
        PRODUCTS,
        0,
    )
    assert last.detail == "completed 3", last

    verified = Recorder()
    assert api.verify(config, spark=spark, progress=verified).clean
    assert verified.events[0] == ("started", ("verify", ("products",)))
    assert verified.events[-1] == ("finished", api.Outcome.DONE)
    ranges = [t for t in verified.tallies() if t.unit == "ranges"]
    assert ranges and ranges[-1].done == ranges[-1].total == 3, verified.events

    # explain: the job's own explanation, every field of `explain --json`
    explained = api.explain(config, doc_id="7")
    assert explained.outcome is api.Outcome.DONE and explained.doc_id == "7"
    assert explained.to_dict() == explain_index(pipeline, None, "7").to_dict()
    assert explained.document["id"] == 7 and explained.partitions.count == 3

    # dead letters: listed, then re-driven from the source with a tally per page
    with open_store(pipeline) as store:
        store.dead_letters.add("job-x", "products", None, [("7", "MapperParsingException", "failed to parse [price]")])
    listed = api.dead_letters(config)
    assert listed.count == 1 and listed.letters[0].doc_id == "7"
    assert listed.to_dict()["dead_letters"][0]["error_class"] == "MapperParsingException"
    redriven = Recorder()
    again = api.redrive(config, progress=redriven)
    assert (again.outcome, again.attempted, again.succeeded) == (api.Outcome.DONE, 1, 1)
    assert redriven.tallies()[-1] == api.Tally("dead letters", "letters", 1, 1)
    assert api.dead_letters(config).count == 0

    swept = api.gc(config, older_than="1d", dry_run=True)
    assert swept.dry_run and swept.jobs_deleted == 0
    assert ("index", "products_v1") in [(k.what, k.name) for k in swept.kept], swept
    assert swept.to_dict()["kept"][0]["reason"]

    hits = api.search(config, "products", "wireless speaker", limit=3)
    assert 0 < len(hits.hits) <= 3 and hits.to_dict()["hits"][0]["id"] == hits.hits[0].id

    with pytest.raises(api.UsageError, match="no running job"):
        api.stop(config)
    assert api.status(config).job_id == result.job_id


def test_job_calls_run_the_preflight_first(tmp_path: Path) -> None:
    """A table that does not exist: verify and re-drive refuse before they open anything, with the
    lines of `check`, as reindex and sync do."""
    make_shop(tmp_path, 10, partition_size=10)
    config = tmp_path / "pipeline.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("table: products", "table: no_such_table"), "utf-8")
    for call in (api.verify, api.repair, api.redrive):
        seen = Recorder()
        with pytest.raises(api.ConfigError, match="preflight refused the run") as refused:
            call(config, progress=seen)
        assert "FAIL" in str(refused.value) and "no_such_table" in str(refused.value)
        assert [e for e, _ in seen.events] == ["started", "finished"] and seen.events[-1][1] is api.Outcome.FAILED
    assert not (tmp_path / "index").exists()


def test_check_reports_a_pipeline_that_does_not_load_as_a_failed_check(tmp_path: Path) -> None:
    checked = api.check(tmp_path / "missing.yaml")
    assert (checked.outcome, checked.ok, checked.exit_code) == (api.Outcome.FAILED, False, 2)
    assert [c["name"] for c in checked.checks] == ["config"] and "not found" in checked.checks[0]["detail"]
    assert checked.lines[0].startswith("FAIL config: ")
    assert checked.to_dict() == {"checks": list(checked.checks), "ok": False}


def test_gc_refuses_a_span_that_is_not_one(tmp_path: Path) -> None:
    make_shop(tmp_path, 10, partition_size=10)
    for bad in ("soon", "0d", -3):
        with pytest.raises(api.UsageError, match="older_than"):
            api.gc(tmp_path / "pipeline.yaml", older_than=bad)


def test_init_returns_a_pipeline_that_loads_and_writes_nothing(tmp_path: Path) -> None:
    make_shop(tmp_path, 10, partition_size=10)
    before = sorted(p.name for p in tmp_path.iterdir())
    made = api.init(f"sqlite:///{tmp_path / 'shop.db'}", ["products"], output=tmp_path / "new.yaml")
    assert made.aliases == ("products",) and made.capture in ("log", "polling", "none")
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "init returns text; the caller writes it"
    (tmp_path / "new.yaml").write_text(made.text, encoding="utf-8")
    assert [ix.alias for ix in api.load(tmp_path / "new.yaml").indexes] == ["products"]

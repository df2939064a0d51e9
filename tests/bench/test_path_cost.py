"""bench/path_cost.py times both paths over the same documents, every step, to the end of the data.

Why: its figures back the claim that the package's builder, not its conversion, is what a
wide document costs over a hand-written loop (docs/benchmarks.md). A path that stopped early,
skipped a step or counted another set of documents would make that comparison say nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.path_cost import independent_path, package_path
from bench.wide import generate_wide_sqlite, write_wide_pipeline

ROOTS = 2_500  # two full pages of 1,000 roots and a short third


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wide-path-cost")
    generate_wide_sqlite(work / "wide.db", ROOTS)
    return write_wide_pipeline(work)


def test_both_paths_time_every_step_of_the_same_documents(wide: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(wide.parent)  # the pipeline's relative SQLite URL
    ours = package_path(wide, n_pages=10)
    theirs = independent_path(f"sqlite:///{wide.parent / 'wide.db'}", n_pages=10)
    assert ours.docs == theirs.docs == ROOTS  # both read to the end, past the short last page
    assert set(ours.us) == {"builder_page", "bulk_items", "conversion_and_decode", "add_json"}
    assert set(theirs.us) == {"fetch_and_dicts", "encodings", "decode_and_add_json"}
    assert all(v > 0 for v in (*ours.us.values(), *theirs.us.values())), (ours, theirs)
    assert ours.total_us == pytest.approx(sum(ours.us.values()), abs=0.1)


def test_a_page_limit_stops_both_paths_at_the_same_document(wide: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(wide.parent)
    url = f"sqlite:///{wide.parent / 'wide.db'}"
    assert package_path(wide, n_pages=1).docs == independent_path(url, n_pages=1).docs == 1000

"""docs/configuration.md is generated from the pipeline model and must not drift from it."""

from __future__ import annotations

import difflib
from pathlib import Path

from sparkindex.config.reference import COMMAND, render, undocumented

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_configuration_reference_matches_the_model() -> None:
    expected = render()
    actual = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    if actual != expected:
        diff = difflib.unified_diff(
            actual.splitlines(), expected.splitlines(), "docs/configuration.md", "generated", lineterm="", n=1
        )
        shown = "\n".join(list(diff)[:40])
        raise AssertionError(
            f"docs/configuration.md does not match the config model; regenerate it with\n\n"
            f"    .venv/bin/{COMMAND}\n\n{shown}"
        )


def test_the_reference_is_deterministic() -> None:
    assert render() == render()


def test_every_key_has_a_description() -> None:
    assert undocumented() == [], "give these fields Field(description=...) in src/sparkindex/config/"


def test_every_section_and_key_is_listed() -> None:
    text = render()
    for heading in ("## `source`", "## `indexes[]`", "## `indexes[].relations[]`", "## `sync`", "## `job`"):
        assert heading in text
    for row in ("| `partition_size` |", "| `on_gap` |", "| `class_data_sharing` |", "| `key_diff_range_docs` |"):
        assert row in text

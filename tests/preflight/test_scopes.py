"""Which runs check change capture's prerequisites: a sync always, a reindex when the pipeline
asks for change capture, and never a run that only builds documents (verify, repair, re-drive,
the deferred refresh): a server without logical decoding must not stop a verify."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkindex import api
from sparkindex.config.model import Pipeline
from sparkindex.preflight.model import Scope
from sparkindex.preflight.runner import wants_changes


def _pipeline(tmp_path: Path, sync_section: bool) -> Pipeline:
    return api.load(
        "source: {url: 'postgresql://u@127.0.0.1:1/shop'}\n"
        "target: {url: 'tantivy://index'}\n"
        f"coordination: {{url: 'sqlite:///{tmp_path}/state.db'}}\n"
        "indexes:\n  - {alias: products, table: products}\n" + ("sync: {group: live}\n" if sync_section else "")
    )


@pytest.mark.parametrize(
    ("scope", "sync_section", "wanted"),
    [
        ("sync", False, True),
        ("reindex", True, True),
        ("reindex", False, False),
        ("check", True, True),
        ("documents", True, False),
        ("documents", False, False),
    ],
)
def test_change_capture_is_checked_only_for_runs_that_capture(
    tmp_path: Path, scope: Scope, sync_section: bool, wanted: bool
) -> None:
    assert wants_changes(_pipeline(tmp_path, sync_section), scope) is wanted

"""``/metrics`` of a real server passes Prometheus's own linter, ``promtool check metrics``.

Why: a scrape that Prometheus accepts can still break the conventions its tooling relies on (a
gauge named ``*_count`` reads as a histogram's or summary's count series to every query builder
and recording rule); promtool is the reference for those conventions. Debian's ``prometheus``
package ships it (``scripts/test-services.sh`` installs it).
"""

from __future__ import annotations

import shutil
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from tests.server.conftest import ServerProcess

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def test_metrics_pass_promtool_check(server: ServerProcess) -> None:
    response = server.http.get("/metrics")
    assert response.status_code == 200
    text = response.text
    # the populated store has jobs, partitions and dead letters: the families carry samples
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "sparkindex_partitions_acquired" in names and "sparkindex_dead_letters" in names
    run = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    findings = (run.stdout + run.stderr).strip()
    assert run.returncode == 0 and findings == "", f"promtool check metrics:\n{findings}"


def test_seed_names_stay_in_help_text(server: ServerProcess) -> None:
    """The renamed families still say which Data Prepper metric they are."""
    families = {f.name: f for f in text_string_to_metric_families(server.http.get("/metrics").text)}
    created = families["sparkindex_partitions_planned"]
    assert created.type == "counter" and "partitionsCreatedCount" in created.documentation
    held = families["sparkindex_partitions_held"]
    assert held.type == "gauge" and "partitionsAcquiredCount" in held.documentation
    assert "sparkindex_partitions_acquired_count" not in families
    assert "sparkindex_partitions_created_count" not in families

"""The target: a search engine that answers, at a version sparkindex supports, and lets these
credentials create indexes and move aliases; or, for the embedded Tantivy index, a writable
directory with room on its file system.

The privilege probe does what a reindex does first, on a throwaway index named like a version
of the first alias (``<alias>_v0check<hex>``, never a version number, so no prune or version
listing counts it): a role scoped to ``<alias>*`` passes it exactly when it passes the run. The
index is deleted again whatever happens. OpenSearch's and Elasticsearch's security APIs differ
and are absent without their plugins; the probe works the same on every server.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Sequence
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.errors import ConfigError, PermanentError, SparkIndexError, TransientError
from sparkindex.preflight.model import Check, Options, existing_ancestor, fail, ok, warn
from sparkindex.targets.registry import open_target
from sparkindex.targets.search_engine.errors import HttpFailure, request_error
from sparkindex.targets.search_engine.target import SearchEngineTarget

#: the oldest servers sparkindex supports: OpenSearch 2.12 and Elasticsearch 7.10
MINIMUM = {"opensearch": (2, 12), "elasticsearch": (7, 10)}
ENGINE = {"opensearch": "OpenSearch", "elasticsearch": "Elasticsearch"}
REACH_FIX = "start the server, or correct the host, port and scheme in target.url"
PROBE_TIMEOUT_S = 30.0


def check_target(pipeline: Pipeline, aliases: Sequence[str], options: Options) -> list[Check]:
    url = pipeline.target.url
    if url.split(":", 1)[0].lower() == "tantivy":
        return _tantivy(pipeline, options)
    try:
        target = open_target(url, pipeline.base_dir, pipeline.target.options)
    except ConfigError as exc:
        return [fail("target.url", str(exc), "correct target.url and target.options")]
    if not isinstance(target, SearchEngineTarget):
        return []
    try:
        where = target.config.describe()
        try:
            info = _root(target, options.connect_timeout_s * 2)
        except TransientError as exc:
            return [fail("target.reachable", str(exc), REACH_FIX, transient=True)]
        except PermanentError as exc:
            return [fail("target.reachable", str(exc), "check the credentials and TLS options of the target")]
        checks = [ok("target.reachable", f"{where} answers"), _version(info, where)]
        if options.probe_writes and aliases:
            checks.append(_privileges(target, aliases[0]))
        return checks
    finally:
        target.close()


def _root(target: SearchEngineTarget[Any], timeout_s: float) -> Any:
    """``GET /``, asked once: a server that does not answer in time is reported, not retried
    host after host (the run that follows retries as it always does)."""
    api = target.api
    try:
        return api.raw("GET", "/", timeout_s=timeout_s, single_try=True)
    except HttpFailure as failure:
        raise request_error(failure, "reading the server's version", api.where) from None


def _version(info: Any, where: str) -> Check:
    name = "target.version"
    version = info.get("version", {}) if isinstance(info, dict) else {}
    number = str(version.get("number", ""))
    kind = "opensearch" if version.get("distribution") == "opensearch" else "elasticsearch"
    parts = tuple(int(p) for p in re.findall(r"\d+", number)[:2])
    minimum = MINIMUM[kind]
    engine, least = ENGINE[kind], ".".join(map(str, minimum))
    if len(parts) < 2:
        return warn(name, f"{where} reports no version number ({number or 'none'})", f"use {engine} >= {least}")
    if parts < minimum:
        return fail(name, f"{where} is {engine} {number}; sparkindex needs {least} or later", f"upgrade to {least}+")
    return ok(name, f"{engine} {number} (>= {least})")


def _privileges(target: SearchEngineTarget[Any], alias: str) -> Check:
    name = "target.privileges"
    tag = uuid.uuid4().hex[:8]
    index, probe_alias = f"{alias}_v0check{tag}", f"{alias}_check{tag}"
    api = target.api
    fix = (
        f"grant these credentials create_index, write, delete_index and manage_aliases on {alias}_v* and the alias "
        f"{alias} (an OpenSearch role's index_permissions, an Elasticsearch role's indices privileges), and "
        "write on .sparkindex-fences"
    )
    try:
        try:
            body = {"settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0}}}
            api.call("PUT", f"/{index}", f"creating the throwaway index {index!r}", body)
            api.call(
                "POST",
                "/_aliases",
                f"pointing the throwaway alias {probe_alias!r} at it",
                {"actions": [{"add": {"index": index, "alias": probe_alias}}]},
            )
        finally:
            api.call("DELETE", f"/{index}", f"deleting the throwaway index {index!r}", missing_ok=True)
    except TransientError as exc:
        return fail(name, str(exc), REACH_FIX, transient=True)
    except SparkIndexError as exc:
        return fail(name, str(exc), fix)
    return ok(name, f"an index ({alias}_v*) was created, given an alias and deleted")


def _tantivy(pipeline: Pipeline, options: Options) -> list[Check]:
    from sparkindex.targets.tantivy import TantivyTargetConfig

    try:
        root = TantivyTargetConfig.from_url(pipeline.target.url, pipeline.base_dir, pipeline.target.options).root
    except ConfigError as exc:
        return [fail("target.url", str(exc), "correct target.url and target.options")]
    existing = existing_ancestor(root)
    if not os.access(existing, os.W_OK | os.X_OK):
        return [
            fail(
                "target.writable",
                f"{existing} is not writable, so the Tantivy index {root} cannot be written",
                f"make {existing} writable for this user, or point target.url elsewhere",
            )
        ]
    how = "writable" if existing == root else f"created at the first run (in {existing})"
    checks = [ok("target.writable", f"Tantivy index directory {root}: {how}")]
    free = shutil.disk_usage(existing).free
    shown = f"{free / (1 << 30):.1f} GiB free on the file system of {existing}"
    if free < options.min_free_disk_bytes:
        checks.append(
            warn(
                "target.disk",
                f"{shown}, under the minimum of {options.min_free_disk_bytes / (1 << 30):.1f} GiB; a new index "
                "version is written beside the current one",
                "free space there, or point target.url at a larger file system",
            )
        )
    else:
        checks.append(ok("target.disk", shown))
    return checks

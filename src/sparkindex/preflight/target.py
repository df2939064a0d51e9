"""The target: a search engine that answers, at a version sparkindex supports, whose aliases'
names are free (or adopted), and that lets these credentials create indexes and move aliases;
or, for the embedded Tantivy index, a writable directory with room on its file system.

The privilege probe does what a reindex does first, on a throwaway index named like a version
of the first alias (``<alias>_v0check<hex>``, never a version number, so no prune or version
listing counts it): a role scoped to ``<alias>*`` passes it exactly when it passes the run. The
index is deleted again whatever happens. OpenSearch's and Elasticsearch's security APIs differ
and are absent without their plugins; the probe works the same on every server.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from typing import Any

from sparkindex.config.model import Pipeline
from sparkindex.errors import ConfigError, PermanentError, SparkIndexError, TransientError
from sparkindex.extras import fix_for
from sparkindex.preflight.model import Check, Options, existing_ancestor, fail, ok, warn
from sparkindex.resources import open_target
from sparkindex.targets.search_engine.engine import EngineInfo, UnsupportedServer, newer_than_tested
from sparkindex.targets.search_engine.target import SearchEngineTarget
from sparkindex.targets.writer import unmanaged_index_message

REACH_FIX = "start the server, or correct the host, port and scheme in target.url"
PROBE_TIMEOUT_S = 30.0


def check_target(pipeline: Pipeline, aliases: Sequence[str], options: Options) -> list[Check]:
    url = pipeline.target.url
    if url.split(":", 1)[0].lower() == "tantivy":
        return _tantivy(pipeline, options)
    try:
        target = open_target(pipeline)
    except ConfigError as exc:
        return [fail("target.url", str(exc), fix_for(exc, "correct target.url and target.options"))]
    if not isinstance(target, SearchEngineTarget):
        target.close()
        return []
    try:
        where = target.config.describe()
        # the server's root, with a short timeout (the run that follows waits as it always does)
        target.IDENTIFY_TIMEOUT_S = options.connect_timeout_s * 2
        try:
            engine = target.engine
        except UnsupportedServer as exc:
            return [ok("target.reachable", f"{where} answers"), fail("target.version", str(exc), _VERSION_FIX)]
        except ConfigError as exc:  # the options (credentials for signing, say): nothing was sent
            return [fail("target.options", str(exc), fix_for(exc, "correct target.url and target.options"))]
        except TransientError as exc:
            return [fail("target.reachable", str(exc), REACH_FIX, transient=True)]
        except PermanentError as exc:
            return [fail("target.reachable", str(exc), "check the credentials and TLS options of the target")]
        checks = [ok("target.reachable", f"{where} answers"), _version(engine)]
        checks += [_unmanaged(target, alias, options.adopt) for alias in aliases]
        if options.probe_writes and aliases:
            checks.append(_privileges(target, aliases[0]))
        return checks
    finally:
        target.close()


_VERSION_FIX = (
    "point target.url at Elasticsearch 7.10 or later or OpenSearch 1.0 or later, with the scheme of that engine "
    "(docs/targets.md lists what was tested)"
)


def _version(engine: EngineInfo) -> Check:
    name = "target.version"
    detail = f"{engine}; {engine.describe_wire()}"
    if newer_than_tested(engine):
        return warn(name, f"{detail}; newer than the versions tested", "docs/targets.md lists the tested versions")
    return ok(name, detail)


def _unmanaged(target: SearchEngineTarget[Any], alias: str, adopt: bool) -> Check:
    name = f"target.alias.{alias}"
    try:
        taken = target.unmanaged_index(alias)
    except SparkIndexError as exc:
        return fail(name, str(exc), REACH_FIX, transient=isinstance(exc, TransientError))
    if not taken:
        return ok(name, f"the name {alias!r} is free for the alias, or the alias already exists")
    if adopt:
        return warn(
            name,
            f"{alias!r} is an index sparkindex did not make: --adopt builds {alias}_v1, then deletes {alias!r} "
            f"and points the alias at {alias}_v1 in one request",
            "back it up first if it holds anything the source cannot rebuild",
        )
    return fail(name, unmanaged_index_message(alias, target.ENGINE), f"sparkindex reindex --adopt -i {alias}")


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
        return [fail("target.url", str(exc), fix_for(exc, "correct target.url and target.options"))]
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

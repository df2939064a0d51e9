"""A job's fingerprint: what its documents are built from, so a rerun resumes only the same job.

Resuming a half-built index with a different mapping, different columns or another source would
mix two kinds of documents in one version. The fingerprint covers what decides the documents
(source and target, tables, keys, columns, relations, the mapping, external versions, the
index's own settings, row filters, renames, computed fields, routing, the transform and the
delete mode), not what only decides speed
(page and batch sizes, partition size, Spark settings).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.documents.hashing import transform_identity
from sparkindex.documents.plan import IndexPlan, RelationPlan


def _relation(rel: RelationPlan) -> dict[str, Any]:
    return {
        "name": rel.name,
        "kind": rel.kind,
        "table": rel.table.name,
        "emit": rel.emit,
        "local": rel.local_key,
        "remote": rel.remote_key,
        "order": rel.order_by,
        "version": rel.version,
        **_unless_plain({"shape": rel.shape.describe() if not rel.shape.plain else None}),
        "children": [_relation(c) for c in rel.children],
    }


def _unless_plain(described: dict[str, Any]) -> dict[str, Any]:
    """*described* without the entries at their defaults: a plan that uses none of the shaping
    keys fingerprints as it did before they existed, so its unfinished job still resumes."""
    return {k: v for k, v in described.items() if v not in (None, "hard")}


def plan_fingerprint(plans: dict[str, tuple[IndexPlan, Any]], pipeline: Pipeline) -> str:
    described = {
        "source": redact_url(pipeline.source_url()),
        "target": redact_url(pipeline.target.url),
        "indexes": {
            alias: {
                "table": plan.table.name,
                "id": plan.id_columns,
                "emit": plan.emit,
                "relations": [_relation(r) for r in plan.relations],
                "mapping": mapping,
                # external versions decide which write wins; the index's own settings (analysis)
                # decide how its documents are indexed
                "version": plan.version,
                "join": [plan.join_field, plan.join_parent],
                "settings": plan.config.settings.to_target(),
                # which rows, under which names, routed where, transformed by what, deleted how
                **_unless_plain(
                    {
                        "shape": plan.shape.describe() if not plan.shape.plain else None,
                        "routing": plan.routing,
                        "transform": transform_identity(plan),
                        "deletes": plan.config.deletes,
                    }
                ),
            }
            for alias, (plan, mapping) in sorted(plans.items())
        },
    }
    return hashlib.blake2b(orjson.dumps(described, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()

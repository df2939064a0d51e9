"""``init`` from URL to text: reflect, infer, propose change capture, render, and prove it loads.

The text is written twice: first without change capture, loaded back and resolved against the
schema exactly as ``reindex`` resolves it (the plans the capture checks need); then with the
proposal. The final text is loaded and resolved again, and must read back as the tree it was
written from: a pipeline ``init`` writes but ``reindex`` would refuse is a bug, caught here
rather than in the user's first run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sparkindex.config.loader import parse_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.documents.mapping import infer_mapping
from sparkindex.documents.plan import IndexPlan, resolve_index
from sparkindex.errors import ConfigError, PermanentError, UsageError
from sparkindex.scaffold.capture import propose_capture
from sparkindex.scaffold.connect import open_database
from sparkindex.scaffold.reflect import SchemaGraph, reflect_schema
from sparkindex.scaffold.relations import IndexDraft, alias_for, choose_roots, infer_index
from sparkindex.scaffold.render import Layout, pipeline_tree
from sparkindex.scaffold.row_filter import apply_where
from sparkindex.scaffold.urls import SOURCE_PASSWORD, TARGET_PASSWORD, UrlText, secret_free_url, sqlite_url_text
from sparkindex.scaffold.yaml_text import Map, plain_data, render
from sparkindex.sources.base import Source

STDOUT = Path("-")


@dataclass(frozen=True)
class InitOptions:
    source: str
    #: the file to write (``-``: standard output; paths are then relative to the working folder)
    output: Path = Path("pipeline.yaml")
    tables: list[str] | None = None
    target: str | None = None
    depth: int = 3
    #: a row filter (SQL) for the one index ``tables`` names, or the only one chosen
    where: str | None = None


@dataclass
class InitResult:
    text: str
    aliases: list[str]
    #: tables chosen as roots but written commented out, with the reason
    left_out: dict[str, str]
    #: "log", "polling" or "none"
    capture: str
    #: environment variables the file reads its secrets from
    variables: list[str] = field(default_factory=list)
    #: tables that are in no document at all
    unreached: list[str] = field(default_factory=list)


def scaffold(options: InitOptions) -> InitResult:
    if options.depth < 0:
        raise UsageError(f"--depth {options.depth}: must be 0 or more")
    target = _target_text(options.target)
    source = open_database(options.source)
    try:
        graph = reflect_schema(source)
        taken: set[str] = set()
        drafts = [
            infer_index(graph, root, options.depth, alias_for(root, taken))
            for root in choose_roots(graph, options.tables)
        ]
        usable = [d for d in drafts if d.usable]
        if not usable:
            reasons = "; ".join(f"{d.table}: {d.reason}" for d in drafts)
            raise UsageError(f"no table to index: {reasons}")
        apply_where(drafts, options.tables, options.where, source)
        folder = Path.cwd() if options.output == STDOUT else options.output.resolve().parent
        layout = Layout(
            _source_text(options.source, source, folder),
            target,
            options.depth,
            options.output.name if options.output != STDOUT else "pipeline.yaml",
        )
        env = dict(layout.source.secrets + (target.secrets if target else ()))
        origin = str(options.output)
        unreached = _unreached(graph, usable)
        first, plans = _load(pipeline_tree(drafts, layout, None, unreached), source, folder, origin, env)
        capture = propose_capture(first, source, graph, plans)
        tree = pipeline_tree(drafts, layout, capture, unreached)
        _load(tree, source, folder, origin, env)
        return InitResult(
            render(tree),
            [d.alias for d in usable],
            {d.table: str(d.reason) for d in drafts if not d.usable},
            capture.mode,
            list(env),
            unreached,
        )
    finally:
        source.close()


def _target_text(url: str | None) -> UrlText | None:
    if url is None:
        return None
    from sparkindex.targets.registry import SCHEMES

    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise UsageError(f"--target {redact_url(url)}: unsupported target (supported: {', '.join(SCHEMES)})")
    return secret_free_url(url, TARGET_PASSWORD)


def _source_text(url: str, source: Source, folder: Path) -> UrlText:
    if source.dialect_name == "sqlite":
        return UrlText(sqlite_url_text(url, folder))
    return secret_free_url(url, SOURCE_PASSWORD)


def _load(
    tree: Map, source: Source, folder: Path, origin: str, env: dict[str, str]
) -> tuple[Pipeline, dict[str, IndexPlan]]:
    """The pipeline the text loads as, and its resolved plans; refuses text ``reindex`` would."""
    text = render(tree)
    try:
        pipeline = parse_pipeline(text, origin=origin, base_dir=folder, env=env)
        if yaml.safe_load(text) != plain_data(tree):
            raise ConfigError(f"{origin}: the text does not read back as written")
        plans = {}
        for i, cfg in enumerate(pipeline.indexes):
            where = f"{origin}: indexes[{i}]"
            plans[cfg.alias] = plan = resolve_index(source, cfg, where)
            infer_mapping(plan, where)
    except ConfigError as exc:
        raise PermanentError(f"sparkindex init wrote a pipeline that does not load (a bug in init): {exc}") from None
    return pipeline, plans


def _unreached(graph: SchemaGraph, drafts: list[IndexDraft]) -> list[str]:
    seen: set[str] = set()
    for draft in drafts:
        seen.add(draft.table)
        stack = list(draft.relations)
        while stack:
            rel = stack.pop()
            seen.add(rel.table)
            stack.extend(rel.children)
    return [name for name in graph.names() if name not in seen]

"""The drafts as a commented pipeline tree (:mod:`.yaml_text` writes it out).

Every comment states a choice ``init`` made, next to what it chose: why a table is keyed as it
is, which columns were left out, where a relation was cut, what change capture the server
allows. Comments quote table and column names, row counts and redacted URLs, never a secret.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkindex.config.secrets import redact_url
from sparkindex.scaffold.capture import CaptureProposal
from sparkindex.scaffold.columns import ColumnChoice
from sparkindex.scaffold.relations import Cut, IndexDraft, RelationDraft
from sparkindex.scaffold.urls import UrlText
from sparkindex.scaffold.yaml_text import Comment, Entry, Flow, Item, Map, Node, Seq

DEFAULT_TARGET = "tantivy://index"
#: what the file says of the store it leaves to the default (written out, a relative SQLite URL
#: would stay beside this file even when a state folder is given)
STORE_NOTE = [
    "coordination.url: the store of jobs, partitions and offsets. Left out: a SQLite file (state.db) in the",
    "state folder, .sparkindex beside this file or --state-dir / SPARKINDEX_STATE_DIR. A Spark cluster needs",
    "PostgreSQL or MySQL: coordination: {url: postgresql://user@host/db}",
]
MASTER = "local[*,4]"
WHERE_NOTE = [
    "init --where: only rows for which this is true are indexed; sync deletes the document of a row that "
    "stops matching and indexes one that starts to"
]


@dataclass(frozen=True)
class Layout:
    """Where things are: the URLs as written, and what the header says about them."""

    source: UrlText
    target: UrlText | None
    depth: int
    #: the file name the next commands are shown with
    file_name: str


def pipeline_tree(
    drafts: list[IndexDraft], layout: Layout, capture: CaptureProposal | None, unreached: list[str]
) -> Map:
    entries: list[Entry | Comment] = [
        Comment(_header(layout)),
        Entry("source", Map([Entry("url", layout.source.url, _secret_note(layout.source, "--source"))])),
        Comment(STORE_NOTE),
        Entry("target", Map([_target(layout)])),
        Entry(
            "spark",
            Map([Entry("master", MASTER, ["this machine, every core; spark://host:7077 for a cluster"])]),
        ),
        Entry("indexes", Seq([*_indexes(drafts, capture), *_unreached(unreached)])),
    ]
    if capture is not None:
        entries.extend(_sync(capture))
    return Map(entries)


def _header(layout: Layout) -> list[str]:
    run = f"-c {layout.file_name}"
    return [
        f"sparkindex pipeline written by `sparkindex init` (relations followed to depth {layout.depth}) from",
        f"  {redact_url(layout.source.url)}",
        "It runs as it is; each comment below is a choice init made from the schema. Relative paths are "
        "relative to this file. Next:",
        f"  sparkindex check {run}",
        f"  sparkindex reindex {run}",
        f"  sparkindex verify {run}",
    ]


def _secret_note(url: UrlText, option: str) -> list[str]:
    if not url.secrets:
        return []
    names = ", ".join(f"${var}" for var, _ in url.secrets)
    return [
        f"the password of {option} is not written here: set {names} to it (percent-encoded, as in a URL) "
        "before running sparkindex"
    ]


def _target(layout: Layout) -> Entry:
    if layout.target is None:
        return Entry(
            "url",
            DEFAULT_TARGET,
            ["an embedded Tantivy index in ./index; opensearch://host:9200 or elasticsearch://host:9200 for a server"],
        )
    return Entry("url", layout.target.url, _secret_note(layout.target, "--target"))


# -- indexes --------------------------------------------------------------------------------------------
def _indexes(drafts: list[IndexDraft], capture: CaptureProposal | None) -> list[Item | Comment]:
    items: list[Item | Comment] = []
    for draft in drafts:
        rows = f"about {draft.rows:,}" if draft.rows_estimated else f"{draft.rows:,}"
        head = f"{draft.table}: {rows} rows"
        if not draft.usable:
            items.append(
                Item(
                    Map([Entry("alias", draft.alias), Entry("table", draft.table)]),
                    [f"{head}; not indexed: {draft.reason}"],
                    disabled=True,
                )
            )
            continue
        polling = capture.polling.get(draft.alias) if capture is not None else None
        entries: list[Entry | Comment] = [
            Entry("alias", draft.alias),
            Entry("table", draft.table),
            Entry("id", _keys(draft.id)),
        ]
        if draft.where is not None:
            entries.append(Entry("where", draft.where, WHERE_NOTE))
        entries.extend(_columns(draft.columns))
        if polling is not None:
            changes: list[Entry | Comment] = [Entry("column", polling.column)]
            if polling.tables:
                changes.append(Entry("tables", Map([Entry(t, c) for t, c in polling.tables.items()])))
            entries.append(Entry("changes", Map(changes)))
        if draft.relations:
            entries.append(Entry("relations", Seq([_relation(r) for r in draft.relations])))
        entries.extend(_cuts(draft.cuts))
        items.append(Item(Map(entries), [f"{head}; {_id_note(draft)}"]))
    return items


def _unreached(tables: list[str]) -> list[Item | Comment]:
    if not tables:
        return []
    return [
        Comment(
            [
                f"in no document: {', '.join(tables)} (`sparkindex init --table <name>` writes an index of its own, "
                "a larger --depth follows longer chains)"
            ]
        )
    ]


def _id_note(draft: IndexDraft) -> str:
    cols = ", ".join(draft.id)
    if draft.key_source == "primary key":
        return f"document ids are its primary key ({cols})"
    return f"no primary key: document ids are its unique NOT NULL key ({cols})"


def _keys(columns: tuple[str, ...]) -> Node:
    return columns[0] if len(columns) == 1 else Flow(list(columns))


def _columns(choice: ColumnChoice) -> list[Entry | Comment]:
    notes = choice.notes()
    explicit = choice.explicit
    if explicit is None:
        return [Comment(notes)] if notes else []
    return [Entry("columns", Flow(list(explicit)), notes)]


def _relation(rel: RelationDraft) -> Item:
    entries: list[Entry | Comment] = [
        Entry("name", rel.name),
        Entry("type", rel.kind),
        Entry("table", rel.table),
        Entry("local_key", Flow(list(rel.local_key))),
        Entry("remote_key", Flow(list(rel.remote_key))),
    ]
    if rel.order_by is not None:
        entries.append(Entry("order_by", Flow(list(rel.order_by))))
    entries.extend(_columns(rel.columns))
    if rel.children:
        entries.append(Entry("relations", Seq([_relation(c) for c in rel.children])))
    entries.extend(_cuts(rel.cuts))
    return Item(Map(entries), list(rel.notes))


def _cuts(cuts: list[Cut]) -> list[Entry | Comment]:
    return [Comment([f"cut: {c.text}" for c in cuts])] if cuts else []


# -- change capture ----------------------------------------------------------------------------------------
def _sync(capture: CaptureProposal) -> list[Entry | Comment]:
    if capture.sync is None:
        return [Comment(capture.notes)]
    body = Map([Entry(k, v) for k, v in capture.sync.items()])
    return [Entry("sync", body, capture.notes, disabled=not capture.active)]

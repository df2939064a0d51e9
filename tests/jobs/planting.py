"""Indexes built without Spark, and drift of every kind planted into them, for verify's tests.

Documents go through the real builder and the real target (Tantivy's bulk path), exactly as the
job writes them; a duplicate is a second raw copy of an ``_id`` (no delete first), written once
the writer service has exited, as in tests/e2e/test_guarantees.py. Every source and target these
helpers open is closed before they return; :func:`tantivy` hands its target to the caller, who
closes it (``with tantivy(pipeline) as target:``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sparkindex.checksums import document_check
from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.documents.builder import BuiltDocument, make_builder
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.planning import resolve_plans
from sparkindex.keys import document_id, sort_key
from sparkindex.resources import open_source_url, open_target
from sparkindex.retry import Backoff
from sparkindex.sources.base import KeyRange
from sparkindex.targets.base import BulkItem
from sparkindex.targets.tantivy import TantivyTarget
from sparkindex.targets.target import Target
from sparkindex.worker.bulk import bulk_with_retries
from tests.e2e.guarantee_helpers import finish_and_wait, plant_raw, tantivy_body
from tests.e2e.shop import make_shop

KINDS = ("missing", "extra", "stale", "duplicates")


def tantivy(pipeline: Pipeline) -> TantivyTarget:
    """The pipeline's target, which these tests need to be Tantivy's; the caller closes it."""
    target = open_target(pipeline)
    assert isinstance(target, TantivyTarget), pipeline.target.url
    return target


def built_documents(pipeline: Pipeline, alias: str) -> dict[str, BuiltDocument]:
    """Every document the source builds for *alias*, by id, as the job builds them."""
    with open_source_url(pipeline.source_url()) as source:
        plan, _ = resolve_plans(pipeline, source, [alias])[alias]
        builder = make_builder(source, plan)
        docs: dict[str, BuiltDocument] = {}
        after = None
        while True:
            page = builder.page(KeyRange(None, None), after, 1000)
            docs.update((d.id, d) for d in page.docs)
            if page.rows < 1000:
                return docs
            after = page.last_key


def index_without_spark(pipeline: Pipeline, alias: str) -> str:
    """A new version of *alias* holding every document, behind the alias; its name."""
    with open_source_url(pipeline.source_url()) as source, tantivy(pipeline) as target:
        _, mapping = resolve_plans(pipeline, source, [alias])[alias]
        index = target.create_version(alias, mapping)
        write(target, index, [d.bulk_item() for d in built_documents(pipeline, alias).values()])
        finish_and_wait(target, index)
        target.swap(alias, index, target.alias_target(alias))
        return index


def soft_shop(directory: Path, products: int) -> tuple[Pipeline, str]:
    """The shop (partitions of 100 products) with ``deletes: soft``, indexed without Spark: the
    pipeline and its index."""
    make_shop(directory, products=products, partition_size=100)
    path = directory / "pipeline.yaml"
    path.write_text(path.read_text().replace("    complexity: 3.0\n", "    complexity: 3.0\n    deletes: soft\n"))
    pipeline = load_pipeline(path)
    return pipeline, index_without_spark(pipeline, "products")


def write(target: Target, index: str, items: list[BulkItem]) -> None:
    outcome = bulk_with_retries(target, index, items, retries=5, backoff=Backoff(0.05, 0.5))
    assert (outcome.success, outcome.failures) == (len(items), []), outcome.failures


def fields_of(doc: BuiltDocument) -> dict[str, Any]:
    """The document as a dict (a builder whose source wrote canonical JSON passes none along)."""
    return doc.fields if doc.fields is not None else dict(orjson.loads(doc.source))


def variant(doc: BuiltDocument, new_id: str, sort_key: str | None = None, **changes: object) -> BulkItem:
    """*doc* under *new_id*, with some fields changed: stale content, or an extra document."""
    fields = {**fields_of(doc), **changes}
    body = dumps_document(fields)
    # with its own check, as a sync or an older run would have written it: the range's checksum
    # must differ by content, not because a check is absent
    return BulkItem(
        new_id,
        body,
        content_hash(body),
        fields=fields,
        sort_key=sort_key or doc.sort_key,
        check=document_check(new_id, body),
    )


@dataclass(frozen=True)
class Planted:
    missing: str
    extra: str
    stale: str
    duplicate: str | None

    def samples(self) -> dict[str, list[str]]:
        dups = [] if self.duplicate is None else [self.duplicate]
        return {"missing": [self.missing], "extra": [self.extra], "stale": [self.stale], "duplicates": dups}

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.samples().items()}


def plant(
    pipeline: Pipeline,
    index: str,
    docs: dict[str, BuiltDocument],
    *,
    missing: str | None = None,
    extra: tuple[str, tuple[object, ...]] | None = None,
    keyless_extra: tuple[str, str] | None = None,
    stale: str | None = None,
    duplicate: str | None = None,
) -> None:
    """Delete *missing*; add a document for the key *extra* = (model id, key) that no row has (a
    copy of the model's document, with that key's id and sort key), and *keyless_extra* = (model
    id, id) without a sort key; change *stale*; store a
    second copy of *duplicate* (Tantivy only: a search engine keeps one document per id and
    routing, and osmem, the OpenSearch test double, one per id)."""
    with open_target(pipeline) as target:
        _plant(target, index, docs, missing, extra, keyless_extra, stale, duplicate)


def _plant(
    target: Target,
    index: str,
    docs: dict[str, BuiltDocument],
    missing: str | None,
    extra: tuple[str, tuple[object, ...]] | None,
    keyless_extra: tuple[str, str] | None,
    stale: str | None,
    duplicate: str | None,
) -> None:
    items = []
    if missing is not None:
        items.append(BulkItem(missing, op="delete"))
    if extra is not None:
        model, key = extra
        items.append(variant(docs[model], document_id(key), sort_key=sort_key(key)))
    if keyless_extra is not None:  # as documents written before they stored a sort key
        model, doc_id = keyless_extra
        item = variant(docs[model], doc_id)
        items.append(BulkItem(item.id, item.source, item.hash, fields=item.fields))
    if stale is not None:
        some_field = next(k for k, v in fields_of(docs[stale]).items() if isinstance(v, str) and k != "id")
        items.append(variant(docs[stale], stale, **{some_field: "changed behind the job's back"}))
    if items:
        write(target, index, items)
        if isinstance(target, TantivyTarget):
            finish_and_wait(target, index)  # no writer service any more: a raw writer may open the directory
    if duplicate is not None:
        assert isinstance(target, TantivyTarget), "only Tantivy can hold two copies of an id"
        plant_raw(target.root, index, [tantivy_body(target.root, index, docs[duplicate])])


def plant_each_kind(
    pipeline: Pipeline,
    index: str,
    docs: dict[str, BuiltDocument],
    ids: tuple[str, str, str, str | None],
    extra_key: tuple[object, ...],
) -> Planted:
    """One document of each kind of drift: *ids* are (missing, model of the extra, stale,
    duplicate); no duplicate when that is None."""
    missing, model, stale, duplicate = ids
    plant(pipeline, index, docs, missing=missing, extra=(model, extra_key), stale=stale, duplicate=duplicate)
    return Planted(missing, document_id(extra_key), stale, duplicate)

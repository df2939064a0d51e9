"""Documents from rows: relation plans, the builder, mapping inference and content hashes."""

from sparkindex.documents.builder import BuiltDocument, DocumentBuilder
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.documents.mapping import infer_mapping
from sparkindex.documents.plan import IndexPlan, RelationPlan, resolve_index

__all__ = [
    "BuiltDocument",
    "DocumentBuilder",
    "IndexPlan",
    "RelationPlan",
    "content_hash",
    "dumps_document",
    "infer_mapping",
    "resolve_index",
]

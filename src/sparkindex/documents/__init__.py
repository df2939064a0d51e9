"""Documents from rows: plans, builders, mappings, canonical bytes and content hashes.

What a document holds is decided here, once, so a reindex, a sync, verify, repair and ``explain`` build the same
bytes and the same hash. Plans are resolved by the driver (a config error names its key path before any work is
planned) and shipped to the tasks, so workers build from the plan the job was fingerprinted with. This package
reads ``sources`` and speaks the targets' value types (the bulk item); ``sources`` never imports it.

* ``plan``: an index's configuration resolved against the live schema: unknown tables and columns, join checks.
* ``key_rules``: ``id`` unique and NOT NULL, version columns integers or date/times (the plan, ``check`` and
  polling apply the same rules).
* ``shape``: each level's row filter, renames, computed and excluded fields, and the shaped view every read that
  builds documents goes through (filters and expressions checked by the database at plan time).
* ``transform``: per-document Python transforms, run in the workers; ``on_change`` ones only for documents whose
  inputs changed (a cache in the coordination store). ``transforming`` runs one on a builder's page.
* ``tombstones``: soft deletes: the tombstone a deleted row's document becomes, and its recognisable hash.
* ``planning``: the aliases a command names, their plans and mappings (``resolve_plans``), and what the target
  cannot hold, refused before any lock.
* ``fingerprint``: what a job's documents are built from, so a rerun resumes only the same job.
* ``builder``: documents for a page of root rows, or for root keys. Every row read is a document or a
  ``DocumentError``.
* ``in_database``: documents assembled inside PostgreSQL, one statement per page, arriving as the server's bytes.
* ``canonical_sql``: PostgreSQL writes the canonical JSON itself where the plan's types allow. Values it cannot
  promise (NaN, floats it writes with an exponent) are marked and take the decoding path.
* ``hashing``: canonical JSON and the content hash every document carries, keyed by what shapes a document beyond
  its bytes (the transform's identity, the routing column).
* ``floats``: NaN and infinities refused per document; floats PostgreSQL writes as integers restored.
* ``mapping``: the search mapping inferred from the SQL schema, then the ``fields`` and ``mapping`` overrides.
* ``overrides``: ``indexes[].mapping`` merged over the inferred mapping, checked against what the documents hold.
* ``versions``: external versions from a version column (integers as they are, date/times as microseconds).
* ``join``: parent-child documents: child ids ``<relation>:<key>``, routing to the parent, sort keys after it.
* ``from_index``: the plan, mapping and builder of an index-to-index rebuild.
* ``source_lookup``: from document ids back to source rows, for verify's index side and the re-drive. Ids are
  compared, never trusted to the lookup.
"""

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

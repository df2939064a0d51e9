"""The field types a pipeline's mapping may name, which every target knows how to index.

They belong to the targets (each translates them into its engine's own types); the planner checks
overrides against them.
"""

from __future__ import annotations

#: Field types the search-engine targets translate (``targets/search_engine/mapping.py`` accepts
#: these and ``join``; Tantivy indexes its core ones natively and the rest as JSON). ``join`` is left
#: out: parent-child comes from a relation of ``type: join``, which also builds the children.
KNOWN_TYPES = frozenset(
    {
        "binary",
        "boolean",
        "byte",
        "date",
        "date_nanos",
        "dense_vector",
        "double",
        "flat_object",
        "flattened",
        "float",
        "geo_point",
        "half_float",
        "integer",
        "ip",
        "keyword",
        "knn_vector",
        "long",
        "nested",
        "object",
        "scaled_float",
        "short",
        "text",
        "wildcard",
    }
)
CONTAINERS = frozenset({"object", "nested"})
#: Vectors (embeddings a transform adds): OpenSearch's ``knn_vector``, Elasticsearch's
#: ``dense_vector``; a target without vector search keeps them as stored floats in the source.
VECTOR_TYPES = frozenset({"dense_vector", "knn_vector"})

"""An embedding a transform adds, indexed as the search engine's vector type, on documents routed by
a column: OpenSearch (osmem-server, a TEST DOUBLE of it) with ``knn_vector``. The other engine's
vector type is refused by name before an index is created, on both engines' clients (the
Elasticsearch side against its personality in front of osmem, tests.support.personalities:
osmem itself, being OpenSearch, has no ``dense_vector`` to index into)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sparkindex import api
from sparkindex.config import load_pipeline
from sparkindex.resources import open_target
from tests.e2e.shop import make_shop
from tests.support.osmem import *  # noqa: F403 (osmem, osmem_cluster, es_shim)
from tests.support.osmem import OsmemCluster, engine_url
from tests.support.toy_embedding import vector

pytestmark = pytest.mark.slow

PRODUCTS = 30
#: (the engine's vector type, its dimension parameter)
VECTORS = {"opensearch": ("knn_vector", "dimension"), "elasticsearch": ("dense_vector", "dims")}


def _pipeline(directory: Path, url: str, kind: str, parameter: str) -> Path:
    make_shop(directory, PRODUCTS, partition_size=10)
    path = directory / "pipeline.yaml"
    shaped = (
        "    complexity: 3.0\n"
        "    routing: category_id\n"
        "    transform: {function: 'tests.support.toy_embedding:embed', adds: [embedding]}\n"
        f"    mapping: {{properties: {{embedding: {{type: {kind}, {parameter}: 8}}}}}}\n"
    )
    text = path.read_text(encoding="utf-8").replace("    complexity: 3.0\n", shaped)
    path.write_text(text.replace("url: tantivy://index", f"url: {url}"), encoding="utf-8")
    return path


@pytest.mark.parametrize("engine", ["opensearch"])
def test_an_embedding_is_the_engines_vector_field_on_routed_documents(
    engine: str, tmp_path: Path, spark: Any, request: pytest.FixtureRequest, osmem_cluster: OsmemCluster
) -> None:
    url = engine_url(engine, request, osmem_cluster)
    kind, parameter = VECTORS[engine]
    other = next(k for k, _ in VECTORS.values() if k != kind)
    refused = _pipeline(tmp_path / "other", url, other, parameter)
    with pytest.raises(api.ConfigError, match=rf"embedding\.type: '{other}' is not a type"):
        api.reindex(refused, spark=spark, preflight=False)

    path = _pipeline(tmp_path / "shop", url, kind, parameter)
    assert api.reindex(path, spark=spark).indexed == PRODUCTS
    result = api.verify(path, spark=spark)
    assert (result.missing, result.extra, result.stale, result.duplicates) == (0, 0, 0, 0), result.report

    db = sqlite3.connect(tmp_path / "shop" / "shop.db")
    row = db.execute("SELECT name, description, category_id FROM products WHERE id = 5").fetchone()
    name, description, category = row
    with open_target(load_pipeline(path)) as target:
        assert target.mapping("products")["properties"]["embedding"]["type"] == kind
        [stored] = target.documents_by_id("products", ["5"])
    assert stored.routing == str(category)
    assert stored.source["embedding"] == vector(f"{name} {description}")


def test_elasticsearch_refuses_opensearchs_vector_type_by_name(
    tmp_path: Path, spark: Any, request: pytest.FixtureRequest, osmem_cluster: OsmemCluster
) -> None:
    refused = _pipeline(tmp_path, engine_url("elasticsearch", request, osmem_cluster), "knn_vector", "dimension")
    with pytest.raises(api.ConfigError, match=r"embedding\.type: 'knn_vector' is not a type Elasticsearch has"):
        api.reindex(refused, spark=spark, preflight=False)

"""Demo data: the sample shop and the large-document dataset, each with the pipeline that indexes it.

Both are deterministic for a seed, so tests and benchmarks can recompute what the index must hold.

* ``shop``: the sample shop (categories, users, products, reviews) as a SQLite file, and its pipeline
  (``sparkindex demo``).
* ``large``: articles of about 2 KB with nested comments and a three-level object chain, in SQLite or PostgreSQL,
  and its pipeline (the large-document benchmark, docs/benchmarks.md).
"""

from sparkindex.demo.shop import PIPELINE_YAML, generate_shop, write_demo_pipeline

__all__ = ["PIPELINE_YAML", "generate_shop", "write_demo_pipeline"]

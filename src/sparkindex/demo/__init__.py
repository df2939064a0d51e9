"""The sample shop: a SQLite database and the pipeline that indexes it."""

from sparkindex.demo.shop import PIPELINE_YAML, generate_shop, write_demo_pipeline

__all__ = ["PIPELINE_YAML", "generate_shop", "write_demo_pipeline"]

"""The pipeline file: a typed, validated model of what to index from where."""

from sparkindex.config.indexes import FieldOverride, IndexConfig, RelationConfig
from sparkindex.config.job import JobConfig
from sparkindex.config.loader import load_pipeline, parse_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.config.secrets import redact_url

__all__ = [
    "FieldOverride",
    "IndexConfig",
    "JobConfig",
    "Pipeline",
    "RelationConfig",
    "load_pipeline",
    "parse_pipeline",
    "redact_url",
]

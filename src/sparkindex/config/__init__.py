"""The pipeline file: a typed, validated model of what to index from where.

Every section is a pydantic model that forbids unknown keys, so a typo fails with its key path instead of being
ignored. The model is split by section so each stays small, and the configuration reference is generated from it.
A pipeline reaches Spark tasks in its wire form (``Pipeline.to_wire``), never as Spark options.

* ``base``: ``Strict`` and ``Open`` sections (``Open`` keeps keys the search server interprets), shared field types.
* ``urls``: database and index URLs: drivers for plain schemes, SQLite and Tantivy paths relative to the pipeline.
* ``connections``: ``source``, ``coordination``, ``target`` and ``spark``. Their ``repr`` hides passwords and the
  target's option values.
* ``indexes``: one alias (``indexes[]``): root table, relations (``join`` included), field overrides, ``version``,
  ``changes``, how its work is split.
* ``index_settings``: an index's own ``settings`` (analysis included) and its ``mapping`` override.
* ``job``: the ``job`` section (batches, retries, leases, limits) and the ``verify`` schedule.
* ``sync``: the ``sync`` section and an index's polling settings (``indexes[].changes``).
* ``model``: ``Pipeline``, the root: the sections together, unique aliases, URLs resolved, the wire form.
* ``loader``: the YAML file read with ``${VAR}`` interpolation. Errors name the file, the key path and what was
  expected.
* ``secrets``: passwords and tokens kept out of logs, errors and printed config (``redact_url``, ``error_line``).
* ``reference``: ``docs/configuration.md`` generated from the model; a test fails when the file drifts.
"""

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

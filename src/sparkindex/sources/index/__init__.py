"""Indexes as sources: read back into Spark (``spark.read.format("sparkindex")``) and rebuilt
into new versions with a new mapping (a pipeline whose ``source.url`` names a search backend)."""

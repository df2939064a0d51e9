"""sparkindex: distributed, fault-tolerant search indexing on Spark."""

__version__ = "0.1.0"

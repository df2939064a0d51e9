"""Fixtures of the preflight tests: osmem-server (a TEST DOUBLE of OpenSearch) for the target checks."""

from tests.support.osmem import *  # noqa: F403  (osmem, osmem_cluster, es_shim, fault_proxy)

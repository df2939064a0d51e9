"""Target tests: osmem-server (a TEST DOUBLE of OpenSearch) and the proxies in front of it."""

from tests.support.osmem import es_shim, fault_proxy, osmem, osmem_cluster  # noqa: F401

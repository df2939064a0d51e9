"""Fixtures of the row-filter and field-shaping tests (issue 32).

The session's ``spark``, ``services`` (the PostgreSQL and MariaDB test servers) and ``cli`` come
from ``tests/conftest.py``; osmem-server (a TEST DOUBLE of OpenSearch) for the tests whose target
is a search engine.
"""

from tests.support.osmem import *  # noqa: F403  (osmem, osmem_cluster, es_shim, fault_proxy)

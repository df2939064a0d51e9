"""Which MySQL driver: PyMySQL (pure Python) or mysqlclient (C), measured on the source read path.

Run with both installed: ``python -m bench.mysql_driver``. The figure that matters is documents
built per second through sparkindex's own keyset pages and batched relation fetches.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.pg import MYSQL, services
from sparkindex.demo.shop import generate_shop, shop_index_config
from sparkindex.documents import resolve_index
from sparkindex.documents.builder import DocumentBuilder
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.shop import copy_shop, fresh_database

CONFIG = shop_index_config()


def docs_per_s(url: str) -> float:
    with open_source_url(url) as source:
        builder = DocumentBuilder(source, resolve_index(source, CONFIG, "bench"))
        best = 0.0
        for _ in range(2):
            t0, after, n = time.perf_counter(), None, 0
            while True:
                page = builder.page(KeyRange(None, None), after, 1000)
                n += len(page.docs)
                if page.rows < 1000:
                    break
                after = page.last_key
            best = max(best, n / (time.perf_counter() - t0))
    return best


def main(rows: int = 30_000) -> None:
    services()
    work = Path(tempfile.mkdtemp(prefix="sparkindex-mysql-driver-"))
    generate_shop(work / "shop.db", rows)
    url = fresh_database(MYSQL, "driver_bench")
    copy_shop(work / "shop.db", url)
    pymysql_rate = docs_per_s(url.replace("mysql+mysqldb", "mysql+pymysql"))
    mysqlclient_rate = docs_per_s(url.replace("mysql+pymysql", "mysql+mysqldb"))
    print(
        orjson.dumps(
            {
                "bench": "mysql_driver",
                "rows": rows,
                "pymysql_docs_per_s": round(pymysql_rate),
                "mysqlclient_docs_per_s": round(mysqlclient_rate),
                "ratio": round(mysqlclient_rate / pymysql_rate, 3),
            }
        ).decode()
    )


if __name__ == "__main__":
    main()

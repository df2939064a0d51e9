"""Passwords with URL punctuation in them: SQLAlchemy reads ``postgresql://u:pa/ss@h/db`` as the
password "pa/ss", so hiding and lifting out the password must read it the same way (a review
found both let such a password through: into logs, `check` lines and the file `init` writes)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from sparkindex.config.secrets import redact_url
from sparkindex.scaffold.urls import secret_free_url

URLS = [
    "postgresql://app:pa/ss@db.example:5432/shop",
    "postgresql://app:p?a#ss@db.example/shop",
    "mysql://root:s3/cr?t@127.0.0.1:3306/shop",
    "opensearch://admin:a/b@search:9200",
]


@pytest.mark.parametrize("url", URLS)
def test_redact_hides_the_whole_password(url: str) -> None:
    password = sa.make_url(url).password
    assert password and ("/" in password or "?" in password)
    shown = redact_url(f"could not connect to {url}: refused")
    assert str(password) not in shown and "***" in shown


@pytest.mark.parametrize("url", URLS)
def test_init_lifts_the_whole_password_out(url: str) -> None:
    written = secret_free_url(url, "PW")
    password = sa.make_url(url).password
    assert written.secrets == (("PW", password),)
    assert str(password) not in written.url
    assert sa.make_url(written.url.replace("${PW}", str(password))) == sa.make_url(url)

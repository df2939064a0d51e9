"""The URLs written into the pipeline: without their secrets, and relative where they can be.

A password in a URL becomes ``${VARIABLE}`` (the loader interpolates the environment), so the
file can be committed and shared; the variable gets the text exactly as it stood in the URL,
percent-encoding included. A SQLite file inside the pipeline's folder is written relative to
it (the loader resolves it against the file), so the folder can move and the same schema gives
the same bytes wherever it lives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

SOURCE_PASSWORD = "SPARKINDEX_SOURCE_PASSWORD"
TARGET_PASSWORD = "SPARKINDEX_TARGET_PASSWORD"

#: the password runs to the userinfo's "@" ("/", "?" and "#" included, as SQLAlchemy reads it)
_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)(?P<secret>[^@\s]+)(?P<tail>@)")
_QUERY = re.compile(r"(?i)(?P<head>[?&](?:password|passwd|pwd|token|api_key|apikey|secret)=)(?P<secret>[^&\s]+)")


@dataclass(frozen=True)
class UrlText:
    """A URL as written, and the secrets taken out of it: (variable, text in the URL)."""

    url: str
    secrets: tuple[tuple[str, str], ...] = ()

    @property
    def variable(self) -> str | None:
        return self.secrets[0][0] if self.secrets else None

    @property
    def value(self) -> str | None:
        return self.secrets[0][1] if self.secrets else None


def secret_free_url(url: str, variable: str) -> UrlText:
    """*url* with each secret (the userinfo password, a ``password=`` query parameter) replaced by
    ``${variable}`` (the next ones by ``${variable_2}``, ...)."""
    secrets: list[tuple[str, str]] = []

    def name() -> str:
        return variable if not secrets else f"{variable}_{len(secrets) + 1}"

    def take(m: re.Match[str]) -> str:
        var = name()
        secrets.append((var, m["secret"]))
        return m["head"] + "${" + var + "}" + m.groupdict().get("tail", "")

    written = _USERINFO.sub(take, url, count=1)
    written = _QUERY.sub(lambda m: take(m), written)
    return UrlText(written, tuple(secrets))


def sqlite_url_text(url: str, folder: Path) -> str:
    """A SQLite URL for a pipeline file in *folder*: relative when the database lies inside it."""
    parsed = sa.make_url(url)
    database = Path(parsed.database or "").resolve()
    try:
        shown = database.relative_to(folder.resolve()).as_posix()
    except ValueError:
        shown = database.as_posix()
    query = url.partition("?")[2]
    return f"sqlite:///{shown}" + (f"?{query}" if query else "")

"""Which engine a target is, and what that engine accepts: read once at connect, from ``GET /``.

Both engines describe themselves at their root: ``version.number``, and on OpenSearch
``version.distribution: "opensearch"``. Elasticsearch 7.14 and later also send the response
header ``X-Elastic-Product: Elasticsearch`` (older ones are recognised by their tagline).

What depends on the engine and its version is decided here, once:

* **Media types.** Elasticsearch's REST API compatibility: a server of major N accepts
  ``application/vnd.elasticsearch+json; compatible-with=N`` and ``N-1`` and answers any other
  version with 400 ``media_type_header_exception``. Plain ``application/json`` is accepted by
  every version. So each major is sent what it documents: 9 gets ``compatible-with=9``, 8 gets
  ``compatible-with=8``, 7 gets plain JSON (7.10-7.12 know no versioned types). OpenSearch
  takes plain JSON.
* **Features.** ``must_exist`` on an alias ``remove`` (the compare-and-swap of the alias) is
  parsed by Elasticsearch 7.11+ (7.10 shipped it unparsed) and OpenSearch 2.12+; older servers
  refuse the field, so the swap falls back to the single-write-index rule (see :mod:`.aliases`).
* **Support.** Elasticsearch 7.10 to 9 and OpenSearch 1 to 3. An older server, or one that is
  neither engine, is refused with what was found and what is needed (a
  :class:`~sparkindex.errors.ConfigError`: exit 2), before any job starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from sparkindex.errors import ConfigError

Distribution = Literal["elasticsearch", "opensearch"]

NAMES: dict[Distribution, str] = {"elasticsearch": "Elasticsearch", "opensearch": "OpenSearch"}
#: the oldest release of each engine sparkindex works with, and the newest major it was tested on
OLDEST: dict[Distribution, tuple[int, int]] = {"elasticsearch": (7, 10), "opensearch": (1, 0)}
NEWEST_TESTED: dict[Distribution, int] = {"elasticsearch": 9, "opensearch": 3}
#: where the alias compare-and-swap's ``must_exist`` starts
MUST_EXIST_SINCE: dict[Distribution, tuple[int, int]] = {"elasticsearch": (7, 11), "opensearch": (2, 12)}
#: the first Elasticsearch that sends X-Elastic-Product on every answer
PRODUCT_HEADER_SINCE = (7, 14)
ES_TAGLINE = "You Know, for Search"
OS_TAGLINE = "The OpenSearch Project"


class UnsupportedServer(ConfigError):
    """The server is not an engine (or a version of one) that sparkindex can serve."""


_JSON = "application/json"
_NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class MediaTypes:
    """The Content-Type and Accept values for JSON and NDJSON bodies."""

    json: str
    ndjson: str

    def headers(self, ndjson: bool) -> dict[str, str]:
        return {"content-type": self.ndjson if ndjson else self.json, "accept": self.json}


PLAIN = MediaTypes(_JSON, _NDJSON)


def compatible_with(major: int) -> MediaTypes:
    """Elasticsearch's versioned media types for *major*."""
    return MediaTypes(
        f"application/vnd.elasticsearch+json; compatible-with={major}",
        f"application/vnd.elasticsearch+x-ndjson; compatible-with={major}",
    )


@dataclass(frozen=True)
class EngineInfo:
    """One server's identity: engine, version, and where it came from (``GET /`` or the config)."""

    distribution: Distribution
    number: str
    major: int
    minor: int
    #: "default" or "oss" on Elasticsearch; empty when not reported
    build_flavor: str = ""
    #: declared in target.options.engine_version instead of read from the server
    declared: bool = False

    @property
    def name(self) -> str:
        return NAMES[self.distribution]

    def __str__(self) -> str:
        return f"{self.name} {self.number}" + (" (declared in target.options.engine_version)" if self.declared else "")

    @property
    def media_types(self) -> MediaTypes:
        if self.distribution == "elasticsearch" and self.major >= 8:
            return compatible_with(self.major)
        return PLAIN

    @property
    def alias_must_exist(self) -> bool:
        return (self.major, self.minor) >= MUST_EXIST_SINCE[self.distribution]

    def describe_wire(self) -> str:
        """How sparkindex talks to it, for ``check``."""
        media = self.media_types
        kind = "plain JSON" if media is PLAIN else media.json.split("; ", 1)[1]
        swap = "must_exist" if self.alias_must_exist else "single write index (no must_exist before this version)"
        return f"media types: {kind}; alias compare-and-swap: {swap}"


def _version(number: str) -> tuple[int, int] | None:
    parts = re.findall(r"\d+", number)
    if len(parts) < 2:
        return None
    return int(parts[0]), int(parts[1])


def identify(body: Any, headers: dict[str, str], where: str) -> EngineInfo:
    """The engine that answered ``GET /`` with *body* and *headers* (lower-case names).

    Raises :class:`ConfigError` for a server that is neither engine or reports no version."""
    version = body.get("version") if isinstance(body, dict) else None
    if not isinstance(version, dict):
        raise UnsupportedServer(
            f"{where} is not OpenSearch or Elasticsearch: its root (GET /) reports no version "
            f"(answer: {str(body)[:120]!r})"
        )
    number = str(version.get("number") or "")
    parsed = _version(number)
    tagline = str(body.get("tagline") or "")
    if version.get("distribution") == "opensearch":
        distribution: Distribution = "opensearch"
    elif tagline.startswith(OS_TAGLINE):
        # OpenSearch 1.x/2.x with compatibility.override_main_response_version reports 7.10.2 and
        # no distribution: its real version is unknown, so it gets the oldest OpenSearch's features
        return EngineInfo("opensearch", f"{number} (compatibility mode)", 1, 0)
    elif headers.get("x-elastic-product") == "Elasticsearch" or tagline == ES_TAGLINE:
        distribution = "elasticsearch"
    else:
        raise UnsupportedServer(
            f"{where} is not OpenSearch or Elasticsearch: version {number or '?'}, "
            f"distribution {version.get('distribution') or 'none'}, tagline {tagline!r}"
        )
    if parsed is None:
        raise UnsupportedServer(f"{where} ({NAMES[distribution]}) reports no usable version ({number!r})")
    # (only a transport that hands back headers can tell; opensearch-py's does not)
    product = headers.get("x-elastic-product")
    if distribution == "elasticsearch" and headers and parsed >= PRODUCT_HEADER_SINCE and product != "Elasticsearch":
        raise UnsupportedServer(
            f"{where} reports Elasticsearch {number} but is not Elasticsearch: every Elasticsearch since "
            "7.14 answers with the header X-Elastic-Product: Elasticsearch"
        )
    return EngineInfo(distribution, number, parsed[0], parsed[1], str(version.get("build_flavor") or ""))


def declared(distribution: Distribution, number: str) -> EngineInfo:
    """An engine version given in the config (``target.options.engine_version``)."""
    parsed = _version(number if number.count(".") else f"{number}.0")
    if parsed is None:
        raise ConfigError(f"target.options.engine_version: {number!r} is not a version such as '8.15' or '2.19.1'")
    return EngineInfo(distribution, number, parsed[0], parsed[1], declared=True)


def refuse_serverless(where: str) -> None:
    """Amazon OpenSearch Serverless serves a subset of OpenSearch's API without what a rebuild
    and a verify need; refused before anything is sent."""
    raise UnsupportedServer(
        f"target.options.aws_service: aoss: {where} is Amazon OpenSearch Serverless, which sparkindex cannot serve: "
        "it has no scroll (verify and hash scans read by scroll), no _refresh and no _cluster/health (a "
        "rebuild refreshes and waits for health before the alias moves), and accepts document ids only in SEARCH "
        "collections. Use a managed domain (aws_service: es) or a self-managed cluster"
    )


def require_supported(info: EngineInfo, expected: Distribution, where: str) -> None:
    """Refuse a server sparkindex cannot serve: the other engine (a scheme mix-up) or too old a
    version."""
    if info.distribution != expected:
        other = "opensearch" if info.distribution == "opensearch" else "elasticsearch"
        raise UnsupportedServer(
            f"{where} is {info}, not {NAMES[expected]}: use the {other}:// (or {other}s://) scheme in target.url"
        )
    oldest = OLDEST[info.distribution]
    if (info.major, info.minor) < oldest:
        raise UnsupportedServer(
            f"{where} is {info}; sparkindex needs {info.name} {oldest[0]}.{oldest[1]} or later "
            f"(for must_exist on alias removal and the bulk and alias APIs it uses); upgrade the cluster"
        )


def newer_than_tested(info: EngineInfo) -> bool:
    return info.major > NEWEST_TESTED[info.distribution]

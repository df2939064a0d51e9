"""Connection settings shared by the HTTP search engines, from ``target.url`` plus ``target.options``.

URL forms (one scheme pair per backend, chosen like ``redis://``/``rediss://``):

* ``<scheme>://host:port`` - plain HTTP, exactly as written (port 9200 when left out);
* ``<scheme>s://host:port`` - HTTPS (or ``tls: true`` in the options);
* ``<scheme>://user:password@host1:9200,host2:9200/prefix`` - several hosts (the client spreads
  requests over them and fails over), basic auth, and a path prefix for a reverse proxy.

Everything else comes from ``target.options`` (a flat mapping, validated here, every error naming
``target.options.<key>``). Secrets (the password, an API key) are kept as ``SecretStr`` so that no
``repr``, log line or error message shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError

DEFAULT_PORT = 9200

C = TypeVar("C", bound="SearchEngineConfig")


@dataclass(frozen=True)
class Host:
    host: str
    port: int

    def url(self, tls: bool, prefix: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if tls else 'http'}://{host}:{self.port}{prefix}"


class SearchEngineConfig(BaseModel):
    """Options common to OpenSearch and Elasticsearch; each backend subclasses it (adding its own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: URL schemes of the backend: plain HTTP and TLS.
    SCHEMES: ClassVar[tuple[str, str]] = ("", "")

    #: from target.url (or, on Elasticsearch, from ``cloud_id``)
    hosts: tuple[Host, ...] = ()
    url_prefix: str = ""
    username: str | None = None
    password: SecretStr | None = None
    #: HTTPS; set by the ``...s://`` scheme, or here.
    tls: bool = False
    #: verify the server's certificate (switching it off also silences the client's warning)
    verify_certs: bool = True
    #: a CA bundle (PEM) for servers signed by a private CA; relative to the pipeline file
    ca_certs: Path | None = None
    #: client certificate and key (PEM) for mutual TLS
    client_cert: Path | None = None
    client_key: Path | None = None
    #: per request; a bulk that takes longer counts as failed (transient)
    request_timeout_s: float = Field(default=60.0, gt=0)
    #: gzip request bodies (bulk bodies compress about 5-10x; costs client CPU)
    http_compress: bool = False
    #: the client's own retries of a request that could not reach a node, moving to the next
    #: host; HTTP error statuses are never retried there (the bulk loop does that, per item)
    max_retries: int = Field(default=2, ge=0, le=10)
    #: connections kept per host; at least the bulks in flight of all threads of one process
    connections_per_host: int = Field(default=10, ge=1, le=256)
    #: one bulk request holds at most this many documents and about this many bytes; a bulk of
    #: more is split (the job's batch_size/batch_bytes decide what one call of bulk() gets)
    max_bulk_docs: int = Field(default=5000, ge=1)
    max_bulk_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    #: cluster health finish_version waits for after restoring the settings ("none": no wait)
    wait_for_status: Literal["green", "yellow", "none"] = "yellow"
    health_timeout_s: float = Field(default=120.0, gt=0)
    #: where the newest fencing token per alias is kept (one document per alias)
    fence_index: str = Field(default=".sparkindex-fences", pattern=r"^[a-z0-9.][a-z0-9._\-]*$")
    #: documents per scroll page and ids per lookup when scanning hashes, keys per page when
    #: listing the checks of a key range
    scan_page_size: int = Field(default=1000, ge=1, le=10_000)
    scroll_keep_alive: str = Field(default="5m", pattern=r"^\d+[smh]$")
    #: refresh before count and scans, so that what a bulk acknowledged is what they see (an index
    #: being built has refresh_interval -1); needs the refresh privilege
    refresh_before_read: bool = True
    #: sort keys sampled to cut an index into ranges (key_splits); more is more even
    split_sample: int = Field(default=10_000, ge=100, le=10_000)
    #: the server's version, declared instead of read from ``GET /`` at connect (for credentials
    #: without the privilege to read the root); sparkindex then talks to it as to that version
    engine_version: str | None = Field(default=None, pattern=r"^\d+(\.\d+){0,2}$")

    @field_validator("ca_certs", "client_cert", "client_key")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no such file: {value}")
        return value

    @model_validator(mode="after")
    def _some_host(self) -> SearchEngineConfig:
        if not self.hosts:
            raise ValueError("target.url names no host")
        return self

    @model_validator(mode="after")
    def _tls_options_need_tls(self) -> SearchEngineConfig:
        if not self.tls:
            given = [k for k in ("ca_certs", "client_cert", "client_key") if getattr(self, k) is not None]
            given += [] if self.verify_certs else ["verify_certs"]
            if given:
                raise ValueError(f"{', '.join(given)} only apply to TLS (a ...s:// scheme, or tls: true)")
        return self

    def host_urls(self) -> list[str]:
        return [h.url(self.tls, self.url_prefix) for h in self.hosts]

    def describe(self) -> str:
        """Where the target is, for messages: hosts without credentials."""
        return ", ".join(self.host_urls())

    @classmethod
    def from_url(cls: type[C], url: str, base_dir: Path, options: dict[str, Any]) -> C:
        fields = parse_url(url, cls.SCHEMES)
        opts = dict(options)
        for key in ("username", "password"):
            if key in opts and fields.get(key) is not None:
                raise ConfigError(f"target.options.{key}: also given in target.url; give it in one place")
        for key in ("ca_certs", "client_cert", "client_key"):
            if isinstance(opts.get(key), str):
                path = Path(opts[key]).expanduser()
                opts[key] = path if path.is_absolute() else (base_dir / path)
        if not fields["hosts"] and "cloud_id" not in opts:
            raise ConfigError(f"target.url: {redact_url(url)!r} names no host")
        merged = {**{k: v for k, v in fields.items() if v is not None}, **opts}
        if opts.get("tls") is False and fields.get("tls"):
            raise ConfigError(f"target.options.tls: false contradicts the TLS scheme of {redact_url(url)!r}")
        try:
            return cls(**merged)
        except ValidationError as exc:
            raise ConfigError(options_error(exc, cls)) from None


def options_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """One line per problem, each naming ``target.options.<key>``; never echoes a value (it may
    be a secret, or a misplaced one)."""
    lines = []
    known = sorted(k for k in model.model_fields if k not in ("hosts", "url_prefix"))
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<options>"
        if err["type"] == "extra_forbidden":
            lines.append(f"target.options.{key}: not an option of this target (options: {', '.join(known)})")
        else:
            lines.append(f"target.options.{key}: {err['msg']}")
    return "; ".join(lines)


def parse_url(url: str, schemes: tuple[str, str]) -> dict[str, Any]:
    """Hosts, credentials, TLS and prefix of a search-engine URL; errors never show the password."""
    shown = redact_url(url)
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in schemes:
        raise ConfigError(f"target.url: {shown!r} is not a {schemes[0]}:// or {schemes[1]}:// URL")
    netloc, _, path = rest.partition("/")
    if "?" in path or "#" in path or "?" in netloc:
        raise ConfigError(f"target.url: {shown!r}: put settings in target.options, not in the URL query")
    username = password = None
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, colon, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon else None
    # no host at all is left to the config (Elastic Cloud's cloud_id names it)
    hosts = [_host(part, shown) for part in netloc.split(",")] if netloc.strip() else []
    prefix = "/" + path.strip("/") if path.strip("/") else ""
    return {
        "hosts": tuple(hosts),
        "url_prefix": prefix,
        "username": username,
        "password": password,
        "tls": scheme == schemes[1] or None,
    }


def _host(part: str, shown: str) -> Host:
    part = part.strip()
    if not part:
        raise ConfigError(f"target.url: {shown!r} names no host")
    if part.startswith("["):  # [::1]:9200
        host, _, port_text = part[1:].partition("]")
        port_text = port_text.removeprefix(":")
    else:
        host, _, port_text = part.partition(":")
    if not host:
        raise ConfigError(f"target.url: {shown!r}: empty host in {part!r}")
    if not port_text:
        return Host(host, DEFAULT_PORT)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"target.url: {shown!r}: bad port {port_text!r} for host {host!r}")
    return Host(host, int(port_text))

"""Test personalities: the documented wire rules of each engine version, applied by the proxy in
front of osmem-server (a TEST DOUBLE of OpenSearch). No real cluster can be installed here, so
each version is reproduced by what it says and refuses on the wire:

* ``GET /``: the version, distribution, build flavour and tagline that version reports;
* ``X-Elastic-Product: Elasticsearch`` on Elasticsearch 7.14 and later, never on OpenSearch
  (osmem sends it on every answer; an OpenSearch personality strips it);
* Elasticsearch's REST API compatibility: a major N accepts ``compatible-with=N`` and ``N-1`` in
  ``application/vnd.elasticsearch+json`` / ``+x-ndjson`` and answers any other version with 400
  ``media_type_header_exception`` (the body Elasticsearch sends: ``status_exception`` "Accept
  version must be either version 8 or 7, but found 9" as its cause). An accepted versioned type
  is answered in the same type. OpenSearch knows no versioned types: 406, as OpenSearch answers
  an unsupported Content-Type;
* ``must_exist`` on an alias ``remove``: OpenSearch before 2.12 refuses the field with 400
  ``x_content_parse_exception`` "[remove] unknown field [must_exist]";
* Amazon OpenSearch Service: every request must carry a valid SigV4 signature for the test key,
  checked with botocore's own signer (403 as AWS answers otherwise).

What is accepted is then forwarded to osmem in plain JSON, because osmem knows no versioned
types: the rule has been applied by then, exactly as the real server would.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import orjson

#: the Lucene each major shipped (what its root reports)
LUCENE = {6: "7.7.3", 7: "8.11.3", 8: "9.12.0", 9: "10.2.2", 1: "8.10.1", 2: "9.12.1", 3: "10.2.1"}
VERSIONED = re.compile(r"application/vnd\.elasticsearch\+([a-z\-]+)\s*;\s*compatible-with=(\d+)")


@dataclass(frozen=True)
class SigV4Key:
    """The test credentials a signing personality accepts."""

    access_key: str = "AKIDSPARKINDEXTEST"
    secret_key: str = "sparkindex-test-secret-key/not-a-real-one"
    region: str = "eu-west-1"
    service: str = "es"


@dataclass(frozen=True)
class Personality:
    key: str
    distribution: str  # "elasticsearch" | "opensearch"
    number: str
    sigv4: SigV4Key | None = None

    @property
    def major(self) -> int:
        return int(self.number.split(".")[0])

    @property
    def minor(self) -> int:
        return int(self.number.split(".")[1])

    @property
    def is_elasticsearch(self) -> bool:
        return self.distribution == "elasticsearch"

    @property
    def sends_product_header(self) -> bool:
        return self.is_elasticsearch and (self.major, self.minor) >= (7, 14)

    @property
    def knows_must_exist(self) -> bool:
        """Elasticsearch parses it from 7.11 (7.10 shipped it unparsed), OpenSearch from 2.12."""
        return (self.major, self.minor) >= ((7, 11) if self.is_elasticsearch else (2, 12))

    def accepts_version(self, asked: int) -> bool:
        """Elasticsearch 8 and later: its major and the one before; 7 knows only its own."""
        return asked == self.major or (self.major >= 8 and asked == self.major - 1)

    @property
    def scheme(self) -> str:
        return "elasticsearch" if self.is_elasticsearch else "opensearch"

    def root(self) -> dict[str, Any]:
        version: dict[str, Any] = {
            "number": self.number,
            "build_type": "docker" if self.is_elasticsearch else "tar",
            "build_hash": "personality",
            "build_date": "2026-01-01T00:00:00.000Z",
            "build_snapshot": False,
            "lucene_version": LUCENE.get(self.major, "9.0.0"),
            "minimum_wire_compatibility_version": f"{self.major - 1}.17.0" if self.is_elasticsearch else "7.10.0",
            "minimum_index_compatibility_version": f"{self.major - 1}.0.0",
        }
        if self.is_elasticsearch:
            version["build_flavor"] = "default"
            tagline = "You Know, for Search"
        else:
            version["distribution"] = "opensearch"
            tagline = "The OpenSearch Project: https://opensearch.org/"
        return {
            "name": f"{self.key}-node",
            "cluster_name": "personality",
            "cluster_uuid": "personality-uuid",
            "version": version,
            "tagline": tagline,
        }

    # -- the rules ----------------------------------------------------------------------------------
    def refuse_media_types(self, headers: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
        """The answer a server of this version gives to these Content-Type/Accept headers, if it
        refuses them."""
        for name in ("accept", "content-type"):
            value = headers.get(name, "")
            found = VERSIONED.search(value)
            if found is None:
                continue
            shown = "Accept" if name == "accept" else "Content-Type"
            if not self.is_elasticsearch:
                return 406, {"error": f"{shown} header [{value}] is not supported", "status": 406}
            asked = int(found[2])
            if not self.accepts_version(asked):
                cause = (
                    f"{shown} version must be either version {self.major} or {self.major - 1}, but found {asked}. "
                    f"{shown}={value}"
                )
                error = {
                    "type": "media_type_header_exception",
                    "reason": "Invalid media-type value on headers [Accept, Content-Type]",
                    "caused_by": {"type": "status_exception", "reason": cause},
                }
                return 400, {"error": {"root_cause": [error], **error}, "status": 400}
        return None

    def refuse_body(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]] | None:
        if self.knows_must_exist or method != "POST" or path.split("?")[0] != "/_aliases" or not body:
            return None
        for action in orjson.loads(body).get("actions", []):
            if "must_exist" in (action.get("remove") or {}):
                error = {"type": "x_content_parse_exception", "reason": "[1:60] [remove] unknown field [must_exist]"}
                return 400, {"error": {"root_cause": [error], **error}, "status": 400}
        return None

    def refuse_signature(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]] | None:
        if self.sigv4 is None:
            return None
        problem = check_sigv4(self.sigv4, method, path, headers, body)
        if problem is None:
            return None
        return 403, {
            "message": f"The request signature we calculated does not match the signature you provided ({problem})"
        }


def plain(value: str) -> str:
    """A versioned media type as plain JSON/NDJSON, for osmem."""
    return VERSIONED.sub(lambda m: f"application/{m[1]}", value)


def check_sigv4(key: SigV4Key, method: str, path: str, headers: dict[str, str], body: bytes) -> str | None:
    """What is wrong with the request's SigV4 signature, or None when botocore's own signer,
    given the test key and the request's own date, computes the same signature."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    auth = headers.get("authorization", "")
    found = re.fullmatch(
        r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
        r"SignedHeaders=([a-z0-9;\-]+), Signature=([0-9a-f]{64})",
        auth,
    )
    if found is None:
        return "no SigV4 Authorization header"
    access_key, day, region, service, signed, signature = found.groups()
    if access_key != key.access_key:
        return f"unknown access key {access_key}"
    if (region, service) != (key.region, key.service):
        return f"signed for {region}/{service}, not {key.region}/{key.service}"
    amz_date = headers.get("x-amz-date", "")
    if not amz_date.startswith(day):
        return "X-Amz-Date does not match the credential scope"
    if headers.get("x-amz-content-sha256", hashlib.sha256(body).hexdigest()) != hashlib.sha256(body).hexdigest():
        return "X-Amz-Content-SHA256 is not the body's hash"
    names = signed.split(";")
    if "host" not in names:
        return "the host header is not signed"
    request = AWSRequest(
        method=method, url=f"http://{headers['host']}{path}", data=body, headers={n: headers.get(n, "") for n in names}
    )
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(key.access_key, key.secret_key), service, region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    return None if expected == signature else "signature mismatch"


ES_7 = Personality("es-7.17", "elasticsearch", "7.17.25")
ES_8 = Personality("es-8.19", "elasticsearch", "8.19.3")
ES_9 = Personality("es-9.1", "elasticsearch", "9.1.4")
OS_1 = Personality("os-1.3", "opensearch", "1.3.20")
OS_2 = Personality("os-2.19", "opensearch", "2.19.3")
OS_3 = Personality("os-3.2", "opensearch", "3.2.0")
AWS = Personality("aws-sigv4", "opensearch", "2.19.3", SigV4Key())

#: every engine version the target suites run against
ALL = (ES_7, ES_8, ES_9, OS_1, OS_2, OS_3, AWS)
BY_KEY = {p.key: p for p in ALL}

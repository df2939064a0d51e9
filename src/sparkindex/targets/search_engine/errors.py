"""What a search engine's failure means for the caller: retry it, dead-letter it, or stop.

Both clients raise their own exception classes; each backend's ``errors`` module turns them into
:class:`HttpFailure` (the server answered with an error status) or a :class:`TransientError`
(the server could not be reached, or did not answer in time). Everything after that is decided
here, once, from the HTTP status and the error type the server reported:

* 408, 429 and 5xx are transient (overload, a node restarting, a shard relocating): retry later.
* 401/403 are permanent and name the credentials' place in the config (never their value).
* Other 4xx are permanent: the same request will fail again.
"""

from __future__ import annotations

from typing import Any

from sparkindex.config.secrets import redact_url
from sparkindex.errors import PermanentError, SparkIndexError, TransientError

TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class HttpFailure(Exception):
    """The server answered *status* with an error body (type and reason as it reported them)."""

    def __init__(self, status: int, error_type: str, reason: str) -> None:
        super().__init__(f"{status} {error_type}: {reason}")
        self.status = status
        self.error_type = error_type
        self.reason = reason


def is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUSES or status >= 500


def describe_error(error: Any) -> tuple[str, str]:
    """(type, reason) of an error as the engines report it: a dict with ``type``/``reason`` and
    maybe ``caused_by``, or a bare string."""
    if isinstance(error, dict):
        error_type = str(error.get("type") or "error")
        # AWS's gateway answers {"message": ...} (a bad SigV4 signature, an expired token); its
        # first line only: the rest quotes the canonical request, session token included
        message = str(error.get("message") or error.get("Message") or "").split("\n", 1)[0]
        reason = str(error.get("reason") or message or error_type)
        cause = error.get("caused_by")
        if isinstance(cause, dict) and cause.get("reason"):
            reason = f"{reason} (caused by {cause.get('type', 'error')}: {cause['reason']})"
        return error_type, reason
    if error is None:
        return "error", "no reason given"
    return "error", str(error)


def failure_from_body(status: int, body: Any) -> HttpFailure:
    """An :class:`HttpFailure` from an error response body (``{"error": ..., "status": ...}``)."""
    error = body.get("error", body) if isinstance(body, dict) else body
    error_type, reason = describe_error(error)
    return HttpFailure(status, error_type, redact_url(reason))


def request_error(failure: HttpFailure, what: str, where: str) -> SparkIndexError:
    """The exception for a whole request that failed: *what* was attempted, *where* (hosts)."""
    text = f"{what} on {where}: {failure.status} {failure.error_type}: {failure.reason}"
    if failure.status == 401:
        return PermanentError(
            f"{what} on {where}: authentication failed (401); check the credentials in target.url "
            "or target.options (username/password, api_key)"
        )
    if failure.status == 403:
        return PermanentError(f"{what} on {where}: not allowed (403) for these credentials: {failure.reason}")
    if is_transient_status(failure.status):
        return TransientError(text)
    return PermanentError(text)


def connection_error(
    what: str, where: str, message: str, *, tls: bool = False, timeout: bool = False
) -> SparkIndexError:
    """No HTTP answer: a TLS failure is permanent (a certificate or CA problem is fixed in the
    config, not by waiting); a timeout or a refused/reset connection is transient."""
    message = redact_url(message)
    if tls:
        return PermanentError(
            f"{what}: TLS with {where} failed: {message}; check target.options.ca_certs "
            "(or verify_certs: false for a test cluster)"
        )
    if timeout:
        return TransientError(f"{what}: {where} did not answer in time ({message})")
    return TransientError(f"{what}: cannot reach {where}: {message}")

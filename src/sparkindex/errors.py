"""One exception tree for the whole tool.

The class of an error tells the caller what to do with it, so that retry loops, the dead-letter
path and the CLI's exit codes can decide without string matching:

* :class:`TransientError` - try again later (with backoff); the same input may succeed.
* :class:`PermanentError` - the same input will fail again; stop retrying.
* :class:`DocumentError` - permanent, but only for one document: dead-letter it and carry on.
* :class:`ConfigError` / :class:`UsageError` - the user must fix their input (exit code 2).
"""

from __future__ import annotations


class SparkIndexError(Exception):
    """Root of every error sparkindex raises on purpose."""

    exit_code = 3


class TransientError(SparkIndexError):
    """Retrying the same operation later may succeed (timeouts, overload, lock busy)."""


class WritesLost(TransientError):
    """Writes a target had applied but not yet made durable are gone (its writer restarted):
    the caller redoes them from its last acknowledged position."""


class PermanentError(SparkIndexError):
    """Retrying will not help; the job or partition must fail or be fixed by a person."""


class DocumentError(PermanentError):
    """Only one document is bad; it goes to the dead letters and the job carries on."""

    def __init__(self, doc_id: str, message: str, error_class: str | None = None) -> None:
        super().__init__(f"document {doc_id!r}: {message}")
        self.doc_id = doc_id
        self.reason = message
        self.error_class = error_class or type(self).__name__


class ConfigError(SparkIndexError):
    """The pipeline file or the schema it names is wrong; the message says where."""

    exit_code = 2


class UsageError(SparkIndexError):
    """The command line asks for something impossible (unknown alias, bad flag combination)."""

    exit_code = 2


class PartitionNotFound(PermanentError):
    """A worker was given a partition the store does not hold (its job was deleted meanwhile)."""


class IllegalTransition(PermanentError):
    """A state machine was asked to move along an edge that is not written down."""


class LockLost(PermanentError):
    """This process no longer holds the lock or lease it was working under (fenced off)."""


class LeaseExpired(LockLost):
    """The process cannot prove that its claim is still its own: its last successful renewal is
    too old (the store is unreachable or too slow), so another process may own the work now."""


class LockHeld(SparkIndexError):
    """Another live process holds the lock for an alias; this run refuses to start."""


class LogGap(PermanentError):
    """The change log cannot serve from a consumer's stored position (a slot dropped or created
    again, binlogs purged, an alias built without an offset): changes in between are gone from
    the log. A sync heals it (``sync.on_gap: reconcile``) or refuses (``fail``, exit 3); it never
    carries on as if nothing happened."""

    def __init__(
        self, message: str, *, alias: str | None = None, stored: int | None = None, available: int | None = None
    ) -> None:
        super().__init__(message)
        self.alias = alias
        self.stored = stored
        self.available = available


# -- across a process boundary -------------------------------------------------------------------
# A Spark task runs in a Python worker; an exception it lets escape reaches the driver only as the
# text of a JVM exception. Tasks therefore return their error as data: the class's name and its
# fields, which the driver turns back into the same class, so retry decisions stay `isinstance`.


def to_wire(exc: SparkIndexError) -> dict[str, object]:
    """The error as plain values: its class and the classes above it (a class defined outside
    this module may not be imported where the error is read), its message and its own fields."""
    fields = {k: v for k, v in vars(exc).items() if isinstance(v, str | int | float | bool) or v is None}
    above = [c.__name__ for c in type(exc).__mro__[1:] if issubclass(c, SparkIndexError)]
    return {"class": type(exc).__name__, "above": above, "message": str(exc), "fields": fields}


def from_wire(data: dict[str, object]) -> SparkIndexError:
    """The error :func:`to_wire` described, as an instance of its own class, or of the nearest
    class above it this process knows (so a transient error stays transient). One that knows none
    of them comes back as a :class:`PermanentError` naming it: an error nobody can classify is not
    retried for ever."""
    name, message = str(data.get("class")), str(data.get("message", ""))
    known = _error_classes()
    above = data.get("above")
    names = [name, *(above if isinstance(above, list) else [])]
    cls = next((known[n] for n in names if n in known), None)
    if cls is None:
        return PermanentError(f"{name}: {message}")
    if cls.__name__ != name:  # the nearest class this process knows: same handling, named in the text
        message = f"{name}: {message}"
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    fields = data.get("fields")
    if isinstance(fields, dict):
        exc.__dict__.update(fields)
    return exc


def _error_classes() -> dict[str, type[SparkIndexError]]:
    found: dict[str, type[SparkIndexError]] = {}
    todo: list[type[SparkIndexError]] = [SparkIndexError]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return found

"""Naming PostgreSQL replication slots, and log sequence numbers as integers.

Kept apart from the change source because preflight, the tests and the chaos campaign name the
slot a consumer reads without opening one.
"""

from __future__ import annotations

import hashlib
import re


def lsn_int(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


#: PostgreSQL's limit on a slot's name
SLOT_NAME_MAX = 63


def slot_name(prefix: str, database: str, namespace: str, consumer: str) -> str:
    """The slot of one consumer of one pipeline on one database.

    Slot names are cluster-wide but a logical slot belongs to one database, so two pipelines on
    one server (two databases, or two coordination stores on one database) must never meet on a
    name: the name ends in a hash of the database, the pipeline's namespace (its coordination
    store and prefix) and the consumer. The readable parts (database, consumer) are cut to fit
    PostgreSQL's 63 characters; the hash keeps the name unique whatever was cut."""
    digest = hashlib.sha256(f"{database}|{namespace}|{consumer}".encode()).hexdigest()[:10]
    room = SLOT_NAME_MAX - len(prefix) - len(digest) - 3
    db, who = _slot_part(database), _slot_part(consumer)
    db = db[: max(0, min(len(db), room // 2, room - len(who)))]
    who = who[: max(0, room - len(db))]
    return "_".join(part for part in (prefix, db, who, digest) if part)


def legacy_slot_name(prefix: str, consumer: str) -> str:
    """How slots were named before they carried the database and namespace (adopted on start)."""
    return re.sub(r"[^a-z0-9_]", "_", f"{prefix}_{consumer}".lower())[:SLOT_NAME_MAX]


def _slot_part(text: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", text.lower())).strip("_")

"""MariaDB GTIDs: ``domain-server-sequence``; the sequence number is a change's position."""

from __future__ import annotations

import re
from collections.abc import Mapping

_GTID = re.compile(r"(\d+)-(\d+)-(\d+)")


def gtid_seq(gtid: str) -> int:
    return int(gtid.rsplit("-", 1)[1]) if gtid else 0


def parse_gtids(text: str | None) -> dict[tuple[int, int], int]:
    """``0-1-812,0-2-900`` (a binlog state, a ``Gtid_list`` event's ``[0-1-812]``): the last
    sequence number per (domain, originating server)."""
    return {(int(d), int(s)): int(n) for d, s, n in _GTID.findall(text or "")}


def format_gtids(gtids: Mapping[tuple[int, int], int]) -> str:
    return ",".join(f"{d}-{s}-{n}" for (d, s), n in sorted(gtids.items()))

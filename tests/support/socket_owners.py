"""Which local process holds each TCP connection: the server reports a connection's client port
(``pg_stat_activity.client_port``), and ``/proc`` maps a port to the socket's inode and the inode
to the process holding it. Used to tell the connections a test's own process holds from those of
the Spark Python workers it forked (each keeps its cached store while it lives)."""

from __future__ import annotations

import os
from pathlib import Path


def descendants(root: int) -> list[int]:
    """*root* and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended while listed
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for name in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    return inodes


def port_owners(root: int) -> dict[int, int]:
    """Local TCP port -> pid, for the sockets held by *root* and its descendants."""
    holder = {inode: pid for pid in descendants(root) for inode in _socket_inodes(pid)}
    owners: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            inode = fields[9]
            if inode in holder:
                owners[int(fields[1].rsplit(":", 1)[1], 16)] = holder[inode]
    return owners


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""

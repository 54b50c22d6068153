"""This process's open file descriptors, and its TCP connections to a port, read from /proc (Linux).

A live server in the test's own process (``tests/support/server.py``) closes its side of a connection in its own
thread, in its own time: counting those would make an exact count depend on timing. So its sockets (bound
locally to its port) are left out; the client's side, which the code under test must close, is counted."""

from __future__ import annotations

import os
from pathlib import Path


def _tcp_inodes(*, local_port: int | None = None, remote_port: int | None = None) -> set[str]:
    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[9]
            if (local_port is not None and local == local_port) or (remote_port is not None and remote == remote_port):
                inodes.add(inode)
    return inodes


def _links() -> dict[str, str]:
    links = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            links[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile (the listing's own descriptor, among others)
            continue
    return links


def open_descriptors(*, server_port: int) -> int:
    """Open descriptors, without the in-process server's sockets (those bound locally to ``server_port``)."""
    links = _links()
    servers = {f"socket:[{inode}]" for inode in _tcp_inodes(local_port=server_port)}
    return sum(1 for target in links.values() if target not in servers)


def connections_to(port: int) -> int:
    """Open client sockets of this process connected to ``port``."""
    clients = {f"socket:[{inode}]" for inode in _tcp_inodes(remote_port=port)}
    return sum(1 for target in _links().values() if target in clients)

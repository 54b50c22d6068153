"""This process's open file descriptors, and its TCP connections to a port, read from /proc (Linux).

A live server in the test's own process (``tests/support/server.py``) closes its side of a connection in its own
thread, in its own time: counting those would make an exact count depend on timing. So its sockets (bound
locally to its port) are left out; the client's side, which the code under test must close, is counted."""

from __future__ import annotations

import os
from pathlib import Path


def _tcp_inodes(*, local_port: int | None = None, remote_port: int | None = None, every: bool = False) -> set[str]:
    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[9]
            if every or (local_port is not None and local == local_port) or (remote_port is not None
                                                                             and remote == remote_port):
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
    """The descriptors a client of ``server_port`` and its event loops can leave open: its TCP connections to
    that port, event-loop selectors (epoll) and non-TCP sockets (a loop's self-pipe socketpair). Left out: the
    in-process server's own sockets (bound locally to ``server_port``), the app's TCP connections to its runners
    and its data files, which the app opens and closes in its own time (a runner connection's keep-alive ends
    when it ends: counting it made an exact count depend on the machine's load)."""
    links = _links()
    tcp = _tcp_inodes(every=True)
    clients = {f"socket:[{inode}]" for inode in _tcp_inodes(remote_port=server_port)}
    tcp_links = {f"socket:[{inode}]" for inode in tcp}
    return sum(1 for target in links.values()
               if target in clients or target == "anon_inode:[eventpoll]"
               or (target.startswith("socket:[") and target not in tcp_links))


def connections_to(port: int) -> int:
    """Open client sockets of this process connected to ``port``."""
    clients = {f"socket:[{inode}]" for inode in _tcp_inodes(remote_port=port)}
    return sum(1 for target in _links().values() if target in clients)

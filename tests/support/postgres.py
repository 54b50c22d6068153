"""A throwaway PostgreSQL cluster for the test session: ``initdb`` + ``pg_ctl`` from Debian's packages
(``deploy/local/install-postgres.sh``) on a temp dir and a free loopback port, run as ``nobody`` when the
tests run as root (PostgreSQL refuses to run as root). Each test gets its own database."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.support.runners import free_port

USER = "ragserve"


def bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: run `bash deploy/local/install-postgres.sh` "
                           "(apt-get install postgresql) first")
    return Path(found[-1]).parent


@dataclass(frozen=True)
class PostgresCluster:
    port: int
    data: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database; its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


@contextmanager
def running_postgres(*, durable: bool = False) -> Iterator[PostgresCluster]:
    """``durable=False`` (tests) turns fsync off; benchmarks keep PostgreSQL's defaults."""
    bin_ = bindir()
    root = Path(tempfile.mkdtemp(prefix="ragserve-pg-"))
    as_user: dict[str, str] = {}
    if os.geteuid() == 0:
        shutil.chown(root, user="nobody")
        as_user = {"user": "nobody"}
    data, port = root / "data", free_port()

    def run(*args: str) -> None:
        done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, cwd=root,
                              **as_user)  # type: ignore[call-overload]
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")

    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200"
    if not durable:
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    run(str(bin_ / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync")
    run(str(bin_ / "pg_ctl"), "-D", str(data), "-l", str(root / "postgres.log"), "-w", "-t", "60", "-o", options,
        "start")
    try:
        yield PostgresCluster(port, data)
    finally:
        run(str(bin_ / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)

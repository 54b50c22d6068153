"""``ragserve querylog export`` writes the log's rows as JSONL, exactly as the API reads them, within the time
window and tenant asked for; ``querylog delete --tenant`` removes that tenant's rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from service.config.quality import QueryLogSettings
from service.quality.log import QualityLog
from service.quality.records import RecordedHit
from service.quality.store_sqlite import SqliteLogStore
from service.store.tenancy import Tenant


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSERVE_")}
    return subprocess.run([sys.executable, "-m", "service.cli", "querylog", *args], env=env, text=True,
                          capture_output=True, timeout=120)


async def test_export_and_delete_a_tenant(tmp_path: Path) -> None:
    now = [1_800_000_000.0]
    log = QualityLog(QueryLogSettings(enabled=True), SqliteLogStore(tmp_path / "querylog.sqlite3"),
                     wall=lambda: now[0])
    for i, tenant in enumerate([None, Tenant("org", "a"), Tenant("org", "b")]):
        log.record(key_id=f"k{i}", tenant=tenant, query=f"question {i}", collections=["kb"], mode="dense",
                   reranked=False, filter=None, hits=[RecordedHit("kb", f"c{i}", f"d{i}", 0.5)], timings_ms={})
        now[0] += 60
    await log.flush()
    entries = await log.store.read()

    done = run("export", "--data-dir", str(tmp_path), "--since", "2027-01-15T08:01:00")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [e.to_dict() for e in entries[1:]]
    out = tmp_path / "a.jsonl"
    assert run("export", "--data-dir", str(tmp_path), "--tenant", "org=a", "--out", str(out)).returncode == 0
    assert [json.loads(line)["query"] for line in out.read_text().splitlines()] == ["question 1"]

    done = run("delete", "--data-dir", str(tmp_path), "--tenant", "org=a")
    assert done.returncode == 0 and "deleted 1 log rows" in done.stderr, done.stderr
    assert [e.row.query for e in await log.store.read()] == ["question 0", "question 2"]

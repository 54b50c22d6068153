"""``ragserve querylog``: the query log's database, read and pruned from this machine (the SQLite file under the
data folder, or ``RAGSERVE_QUERY_LOG__URL``), as an operator with access to it. Over the API, ``GET /v1/querylog``
gives a key the rows it may read."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from service.cli.settings import settings_of


def unix_time(value: str | None) -> float | None:
    """Unix seconds, or an ISO 8601 time (UTC unless it names a zone)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = datetime.fromisoformat(value)
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()


async def export(args: argparse.Namespace, out: TextIO) -> int:
    from service.quality.log import open_quality_log
    from service.quality.metrics import QualityCollector
    from service.quality.store import ALL_TENANTS

    settings = settings_of(args)
    log = await open_quality_log(settings.query_log, settings.query_log_path, QualityCollector())
    written = 0
    try:
        after = None
        tenant: object = ALL_TENANTS if args.tenant is None else args.tenant
        while True:
            entries = await log.store.read(since=unix_time(args.since), until=unix_time(args.until), tenant=tenant,
                                           after=after, limit=1000)
            for entry in entries:
                out.write(json.dumps(entry.to_dict(), ensure_ascii=False) + "\n")
            written += len(entries)
            if len(entries) < 1000:
                return written
            after = (entries[-1].row.created_at, entries[-1].row.search_id)
    finally:
        await log.aclose()


async def delete(args: argparse.Namespace) -> int:
    from service.quality.log import open_quality_log
    from service.quality.metrics import QualityCollector

    settings = settings_of(args)
    log = await open_quality_log(settings.query_log, settings.query_log_path, QualityCollector())
    try:
        return await log.delete_tenant(args.tenant)
    finally:
        await log.aclose()


def cmd_querylog(args: argparse.Namespace) -> None:
    if args.action == "export":
        if args.out is None:
            n = asyncio.run(export(args, sys.stdout))
        else:
            with open(args.out, "w", encoding="utf-8") as f:
                n = asyncio.run(export(args, f))
        print(f"exported {n} rows", file=sys.stderr)
    else:
        if args.tenant is None:
            raise SystemExit("ragserve querylog delete: --tenant field=value is needed")
        print(f"deleted {asyncio.run(delete(args))} log rows of tenant {args.tenant}", file=sys.stderr)


def add_querylog(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("querylog", help="export the query log as JSONL, or delete a tenant's rows (reads the log's "
                       "database: RAGSERVE_QUERY_LOG__URL or <data_dir>/querylog.sqlite3)")
    p.add_argument("action", choices=["export", "delete"])
    p.add_argument("--since", default=None, help="export: rows from this time (Unix seconds or ISO 8601, UTC "
                   "unless zoned)")
    p.add_argument("--until", default=None, help="export: rows before this time")
    p.add_argument("--tenant", default=None, help="a tenant as field=value: export its rows only, or delete them")
    p.add_argument("--out", type=Path, default=None, help="export: write this file (default standard output)")
    p.add_argument("--data-dir", type=Path, default=None)
    p.set_defaults(func=cmd_querylog)

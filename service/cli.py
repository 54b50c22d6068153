"""The ``ragserve`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from service.config import Settings

if TYPE_CHECKING:
    from service.client import Client
    from service.store.snapshots import SnapshotInfo


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in {
        "profile": getattr(args, "profile", None), "host": getattr(args, "host", None),
        "port": getattr(args, "port", None), "data_dir": getattr(args, "data_dir", None),
        "workers": getattr(args, "workers", None),
    }.items() if v is not None}
    return Settings(**overrides)


def _observe(settings: Settings) -> None:
    """Logs and traces for a long-running process (serve, worker), configured before anything logs."""
    from service.observability.logs import configure_logging
    from service.observability.tracing import configure_tracing

    configure_logging(settings.log_format, settings.log_level)
    configure_tracing(settings.otel)


def cmd_serve(args: argparse.Namespace) -> None:
    from service.runners.launcher import runner_specs
    from service.runners.supervisor import supervised
    from service.server import ensure_api_key, serve

    settings = _settings(args)
    _observe(settings)
    key = ensure_api_key(settings)
    if key:
        print(f"Generated API key (development only): {key}", flush=True)
    if args.with_runners:
        with supervised(runner_specs(settings), log_dir=settings.data_dir / "logs",
                        timeout_s=settings.runners.startup_timeout_s):
            serve(settings, with_worker=args.with_worker)
    else:
        serve(settings, with_worker=args.with_worker)


def _api(args: argparse.Namespace) -> tuple[str, str]:
    """Where the API is and the key to send: ``--url``/``--api-key``, else ``RAGSERVE_URL``/``RAGSERVE_API_KEY``
    (what the Python client reads). The server's ``RAGSERVE_API_KEYS`` is the server's: never read here."""
    from service.client.api import DEFAULT_URL
    from service.config import check_environment

    check_environment(os.environ)  # a misspelt RAGSERVE_ variable is named here too, as by every command
    url = args.url or os.environ.get("RAGSERVE_URL") or DEFAULT_URL
    key = args.api_key or os.environ.get("RAGSERVE_API_KEY")
    if not key:
        raise SystemExit("ragserve: no API key: pass --api-key or set RAGSERVE_API_KEY (a key the server accepts; "
                         "RAGSERVE_API_KEYS is the server's own list, not read by client commands)")
    return url, key


def _client(args: argparse.Namespace) -> Client:
    from service.client import Client

    url, key = _api(args)
    return Client(url, key, timeout=600)


def cmd_index(args: argparse.Namespace) -> None:
    from indexer import cli as icli

    options: dict[str, object] = {"prune": args.prune, "chunking": args.chunking}
    if args.chunk_tokens:
        options["chunk_tokens"] = args.chunk_tokens
    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"no such file or folder: {', '.join(missing)}")
    prefixes = icli.name_prefixes(paths)
    failed = 0
    with _client(args) as client:
        for path, prefix in zip(paths, prefixes, strict=True):  # one job per path: each its own source
            job = icli.submit(client, path, args.collection, server_path=args.server_path, options=options,
                              include=args.include or [], exclude=args.exclude or [], name_prefix=prefix)
            print(f"job {job.id} submitted for {path}", file=sys.stderr)
            if args.no_wait:
                print(job.id)
                continue
            job = icli.follow(client, job.id, quiet=args.quiet)
            print(icli.summary(job))
            failed += job.state != "succeeded"
    if failed:
        raise SystemExit(1)


def cmd_search(args: argparse.Namespace) -> None:
    with _client(args) as client:
        result = client.search(args.collection, args.query, top_k=args.top_k,
                               rerank=False if args.no_rerank else None)
    if args.json:
        print(result.model_dump_json(indent=2))
        return
    for hit in result.hits:
        where = hit.location or {}
        extra = f" p.{where['page']}" if "page" in where else ""
        extra += f" slide {where['slide']}" if "slide" in where else ""
        extra += f" rows {where['rows'][0]}-{where['rows'][1]}" if where.get("rows") else ""
        extra += f" § {' > '.join(where['headings'])}" if where.get("headings") else ""
        extra += f" [{where['source']}]" if where.get("source") else ""  # read by OCR, or a VL description
        print(f"{hit.rank:>3}. {hit.score:.4f}  {hit.doc_id}#{hit.chunk_index}{extra}")
        print(f"     {hit.text[:160].replace(chr(10), ' ')}")
    print(f"timings (ms): {result.timings_ms}")


def cmd_context(args: argparse.Namespace) -> None:
    """The context on stdout (what a prompt gets); its sources and what was left out on stderr."""
    with _client(args) as client:
        result = client.context(args.collection, args.query, budget_tokens=args.budget,
                                neighbours=args.neighbours, order=args.order,
                                rerank=False if args.no_rerank else None)
    if args.json:
        print(result.model_dump_json(indent=2))
        return
    print(result.context)
    err = sys.stderr
    print(f"\n{result.tokens} tokens ({result.tokenizer}) for {result.query_used!r}", file=err)
    for p in result.passages:
        where = p.location or {}
        span = f" chars {where['char_start']}-{where['char_end']}" if "char_start" in where else ""
        span += f" p.{where['page']}" if "page" in where else ""
        span += f" § {' > '.join(where['headings'])}" if where.get("headings") else ""
        chunks = ",".join(map(str, p.chunk_indexes))
        print(f"[{p.number}] {p.collection}/{p.doc_id}#{chunks}{span}  {p.tokens} tokens", file=err)
    for d in result.dropped:
        into = f" (passage [{d.passage}])" if d.passage is not None else ""
        print(f"left out {d.collection}/{d.doc_id}#{d.chunk_index}: {d.reason}{into}", file=err)


def cmd_delete(args: argparse.Namespace) -> None:
    """Delete the documents matching a filter; with --dry-run, only say which and how many."""
    try:
        where = json.loads(args.filter) if args.filter else {}
    except ValueError as exc:
        raise SystemExit(f"--filter is not JSON: {exc}") from None
    if not isinstance(where, dict):
        raise SystemExit('--filter must be a JSON object, e.g. \'{"tag": "old"}\'')
    with _client(args) as client:
        result = client.delete_documents(args.collection, filter=where, all=args.all, dry_run=args.dry_run)
    verb = "would delete" if result.dry_run else "deleted"
    print(f"{verb} {result.documents} documents ({result.chunks} chunks) from '{result.collection}'")
    for doc_id in result.doc_ids:
        print(f"  {doc_id}")
    if result.doc_ids_truncated:
        print(f"  ... and {result.documents - len(result.doc_ids)} more")


def cmd_snapshot(args: argparse.Namespace) -> None:
    """Ask the running API for a snapshot (it takes it while it serves), or list the ones it has."""
    with _client(args) as client:
        if args.list:
            listing = client.snapshot_listing()
            taken, unreadable = listing.snapshots, listing.unreadable
        else:
            taken, unreadable = [client.create_snapshot(args.collection)], []
    for snap in taken:
        counts = ", ".join(f"{c.name} {c.points} points" for c in snap.collections) or "no collections"
        print(f"{snap.path}  {snap.created_at}  {counts}  manifest sha256 {snap.manifest_sha256}")
    for broken in unreadable:
        print(f"ragserve: left out {broken.path}: {broken.message} ({broken.code})", file=sys.stderr)


SHA256_HEX = frozenset("0123456789abcdef")


def cmd_restore(args: argparse.Namespace) -> None:
    """Restore a snapshot, every file checked first: the embedded store's into an empty (or new) data folder,
    offline; a Qdrant server's into that server (``--qdrant-url`` or RAGSERVE_QDRANT__URL, its key from
    RAGSERVE_QDRANT__API_KEY), as collections it does not have yet."""
    from service.errors import RagserveError
    from service.store.snapshots import RestoreTargetNotEmpty, SnapshotInfo, restore

    expect = args.expect_sha256.lower() if args.expect_sha256 else None
    if expect is not None and (len(expect) != 64 or not set(expect) <= SHA256_HEX):
        raise SystemExit("ragserve: --expect-sha256 takes the 64 hex digits of the manifest's sha256 "
                         "(as `ragserve snapshot` prints it)")
    try:
        backend = SnapshotInfo.read(args.snapshot).backend
    except RagserveError as exc:
        raise SystemExit(f"ragserve: {exc.message}") from None
    if backend == "server":
        info, into = _restore_to_server(args, expect)
    else:
        if args.data_dir is None:
            raise SystemExit("ragserve: this is a snapshot of the embedded store: name the data folder to restore it "
                             "into with --data-dir (empty or new)")
        settings = _settings(args)
        if settings.qdrant.url:
            raise SystemExit("ragserve: this is a snapshot of the embedded store, and RAGSERVE_QDRANT__URL names a "
                             "Qdrant server: unset it to restore into --data-dir")
        data = settings.data_dir
        if data.exists() and (not data.is_dir() or any(data.iterdir())):
            raise SystemExit(f"ragserve: {RestoreTargetNotEmpty(data).message}")
        try:
            info = restore(args.snapshot, settings.qdrant_path, expect_sha256=expect)
        except RagserveError as exc:
            raise SystemExit(f"ragserve: {exc.message}") from None
        into = str(settings.qdrant_path)
    counts = ", ".join(f"{n} {p} points" for n, p in sorted(info.collections.items())) or "no collections"
    print(f"restored {info.id} ({info.created_at}; {counts}) into {into}")


def _restore_to_server(args: argparse.Namespace, expect: str | None) -> tuple[SnapshotInfo, str]:
    from service.errors import RagserveError
    from service.store import server_snapshots
    from service.store.factory import snapshot_client

    if args.data_dir is not None:
        raise SystemExit("ragserve: this is a snapshot of a Qdrant server: it is restored into a Qdrant server "
                         "(--qdrant-url URL, or RAGSERVE_QDRANT__URL), not into --data-dir")
    settings = Settings()
    url = args.qdrant_url or settings.qdrant.url
    if not url:
        raise SystemExit("ragserve: this is a snapshot of a Qdrant server: name the server to restore it into with "
                         "--qdrant-url URL (or RAGSERVE_QDRANT__URL; its key from RAGSERVE_QDRANT__API_KEY)")

    async def run() -> SnapshotInfo:
        api = snapshot_client(settings, url)
        try:
            return await server_snapshots.restore(args.snapshot, api, expect_sha256=expect)
        finally:
            await api.aclose()

    try:
        return asyncio.run(run()), url
    except RagserveError as exc:
        raise SystemExit(f"ragserve: {exc.message}") from None


def cmd_export(args: argparse.Namespace) -> None:
    """Download a collection as a portable file (points, vectors, settings) through the running API."""
    from service.transfer.cli import export_collection

    url, key = _api(args)
    path = export_collection(url, key, args.collection, Path(args.output) if args.output else None, quiet=args.quiet)
    print(path)


def cmd_import(args: argparse.Namespace) -> None:
    """Upload an export file into a collection through the running API: no embedding call."""
    from service.transfer.cli import import_collection

    url, key = _api(args)
    result = import_collection(url, key, Path(args.file), args.collection, quiet=args.quiet)
    how = "resumed and finished" if result["resumed"] else "created" if result["created"] else "filled"
    print(f"{how} '{result['collection']}': {result['points']} points imported, {result['stored']} stored "
          f"(export {result['export_id']})")
    if result.get("quantization"):
        print(f"{result['quantization']} quantization recorded: searches oversample and rescore now, and "
              f"`ragserve optimize {result['collection']}` (with the service stopped) builds the quantized copy")


def cmd_worker(args: argparse.Namespace) -> None:
    from indexer.cli import run_worker

    _observe(Settings())
    run_worker()


def cmd_keys_hash(args: argparse.Namespace) -> None:
    """Print a keys-file entry for a new key (or for one read from stdin), and the key itself once."""
    from service.auth.keys import ApiKeyEntry, TenantEntry, new_key, scrypt_hash, sha256_hex

    key = sys.stdin.readline().rstrip("\r\n") if args.stdin else new_key()
    if len(key) < 16:
        raise SystemExit("ragserve: a key must be at least 16 characters")
    tenant = None
    if args.tenant:
        field, sep, value = args.tenant.partition("=")
        if not sep:
            raise SystemExit("ragserve: --tenant takes FIELD=VALUE")
        tenant = TenantEntry(field=field, value=value)
    hashed = {"scrypt": scrypt_hash(key)} if args.scheme == "scrypt" else {"sha256": sha256_hex(key)}
    try:
        entry = ApiKeyEntry(id=args.id, scopes=args.scope or ["read"], collections=args.collection, tenant=tenant,
                            **hashed)
    except ValueError as exc:
        raise SystemExit(f"ragserve: {exc}") from None
    if not args.stdin:
        print(f"key (shown once; give it to the client, keep only the entry): {key}", file=sys.stderr)
    print(json.dumps(entry.model_dump(exclude_none=True)))


def cmd_optimize(args: argparse.Namespace) -> None:
    """Build HNSW (or, with --int8, the int8 quantization) for a collection of the embedded store, in this
    process, while nothing else has it open."""
    from service.store.edge_optimize import optimize_collection
    from service.store.errors import CollectionNotFound

    settings = _settings(args)
    if settings.qdrant.url:
        raise SystemExit("ragserve optimize is for the embedded store; a Qdrant server optimizes by itself")
    try:
        optimize_collection(settings.qdrant_path, args.collection, int8=args.int8)
    except CollectionNotFound as exc:
        raise SystemExit(f"ragserve: {exc.message} in {settings.qdrant_path}") from None


def cmd_store_migrate(args: argparse.Namespace) -> None:
    """Bring the embedded store folder to this ragserve's layout, after a verified backup beside it."""
    from service.store.migrate import migrate_store

    settings = _settings(args)
    if settings.qdrant.url:
        raise SystemExit("ragserve store migrate is for the embedded store; a Qdrant server keeps its own format")
    migrate_store(settings.qdrant_path)


def cmd_runners_up(args: argparse.Namespace) -> None:
    from service.runners.launcher import RunnerConfigError, check_command_lines, runner_specs
    from service.runners.supervisor import supervised

    settings = _settings(args)
    specs = runner_specs(settings)
    if args.print_only:
        try:
            check_command_lines(specs)
        except RunnerConfigError as exc:
            if "could not check" not in str(exc):
                raise
            print(f"ragserve: not checked against vLLM's parser: {exc}", file=sys.stderr)
        for s in specs:  # copy-pasteable: quoted, with the environment each runner needs
            env = [f"{k}={v}" for k, v in s.env.items()]
            print(shlex.join(["env", *env, *s.command()] if env else s.command()))
        return
    print(f"starting {len(specs)} runner(s) for profile '{settings.profile}'...", flush=True)
    with supervised(specs, log_dir=settings.data_dir / "logs", timeout_s=settings.runners.startup_timeout_s) as procs:
        for p in procs:
            print(f"  {p.spec.label}: {p.spec.url}  model={p.spec.served_name}  log={p.log_path}", flush=True)
        print("runners healthy (a runner that exits is restarted, with backoff); Ctrl-C stops them.", flush=True)
        signal.pause()


def cmd_runners_plan(args: argparse.Namespace) -> None:
    from service.runners.plan_report import model_runner, profile_runners, render
    from service.runners.planner import Gpus

    try:
        gpus = Gpus(args.gpus, args.gpu_memory, nodes=args.nodes, nvlink=args.nvlink)
        if args.model:
            runners = [model_runner(m, max_model_len=args.max_model_len, kv_cache_dtype=args.kv_cache_dtype or "auto")
                       for m in args.model]
            title = ""
        else:
            settings = _settings(args)
            runners = profile_runners(settings)
            if args.kv_cache_dtype:
                runners = [replace(r, engine=r.engine.model_copy(update={"kv_cache_dtype": args.kv_cache_dtype}))
                           for r in runners]
            title = f"profile {settings.profile}: "
    except (KeyError, ValueError) as exc:
        raise SystemExit(f"ragserve: {exc.args[0] if exc.args else exc}") from None
    print(render(runners, gpus, overhead_gib=args.overhead_gib, title=title,
                 utilization=args.gpu_memory_utilization if args.model is None else
                 (args.gpu_memory_utilization or 0.90)))


def cmd_demo(args: argparse.Namespace) -> None:
    from service.demo.run import run_demo

    if args.profile is None:
        args.profile = "minilm"
    run_demo(_settings(args), stay=not args.no_wait)


def cmd_eval(args: argparse.Namespace) -> None:
    from service.evaluation.dataset import BeirDataset
    from service.evaluation.runner import evaluate_service, format_table

    url, key = _api(args)
    if args.context:
        cmd_eval_context(args, url, key)
        return
    modes = args.mode or [None]
    reports = asyncio.run(evaluate_service(
        url, key, BeirDataset(Path(args.dataset)), args.collection, split=args.split, modes=modes,
        rerank=args.rerank, progress=not args.json,
    ))
    if args.json:
        print(json.dumps([r.__dict__ for r in reports], indent=2))
    else:
        print(format_table(reports))


def cmd_eval_context(args: argparse.Namespace, url: str, key: str) -> None:
    from service.evaluation.context_eval import evaluate_context
    from service.evaluation.context_metrics import format_context_table
    from service.profiles import default_checkpoint, get_profile

    settings = _settings(args)
    tokenizer = Path(args.tokenizer_path or settings.runners.embed_model_path
                     or default_checkpoint(get_profile(settings.profile).embedding)) / "tokenizer.json"
    options = {"neighbours": args.neighbours} if args.neighbours is not None else {}
    rows = asyncio.run(evaluate_context(url, key, Path(args.dataset), args.collection, tokenizer_file=tokenizer,
                                        split=args.split, budget=args.budget, chunk_tokens=args.chunk_tokens,
                                        options=options, min_relevant=args.min_relevant))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(format_context_table(rows))


def cmd_tune_fusion(args: argparse.Namespace) -> None:
    from service.evaluation.dataset import BeirDataset
    from service.evaluation.tuning import tune

    url, key = _api(args)
    results = asyncio.run(tune(url, key, BeirDataset(Path(args.dataset)), args.collection, split=args.split))
    print(f"nDCG@10 on the {args.split} split, best first:")
    for setting, ndcg in results[: args.top]:
        print(f"  {ndcg:.4f}  {setting}")
    print(f"\nbest: {results[0][0].env()}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragserve", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--profile", choices=["qwen3", "qwen3-large", "minilm"], default=None)
        p.add_argument("--data-dir", type=Path, default=None)
        p.add_argument("--host", default=None)
        p.add_argument("--port", type=int, default=None)

    p = sub.add_parser("serve", help="run the query API")
    common(p)
    p.add_argument("--with-runners", action="store_true",
                   help="also start the vLLM runners (and restart one that exits, with backoff)")
    p.add_argument("--with-worker", action="store_true",
                   help="also run the indexing worker in this process (needed with the embedded store)")
    p.add_argument("--workers", type=int, default=None,
                   help="API processes on the one port (default: $RAGSERVE_WORKERS, else 1); see docs/api-processes.md")
    p.set_defaults(func=cmd_serve)

    def api(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", default=None, help="the API (default: $RAGSERVE_URL, else http://127.0.0.1:8000)")
        p.add_argument("--api-key", default=None, help="a key the API accepts (default: $RAGSERVE_API_KEY)")

    p = sub.add_parser("index", help="index files or folders into a collection, with live progress")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="a file or folder; several are several sources (one job each, --prune per source)")
    p.add_argument("--collection", required=True)
    api(p)
    p.add_argument("--server-path", action="store_true",
                   help="let the server read PATH itself (it must be under an allowed root); default: upload")
    p.add_argument("--include", action="append", help="glob of files to take (repeatable)")
    p.add_argument("--exclude", action="append", help="glob of files to skip (repeatable)")
    p.add_argument("--prune", action="store_true",
                   help="delete documents of each PATH that are no longer in it")
    p.add_argument("--chunking", choices=["auto", "tokens", "none"], default="auto")
    p.add_argument("--chunk-tokens", type=int, default=None)
    p.add_argument("--no-wait", action="store_true", help="print the job id and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", help="print the top hits for a query")
    p.add_argument("query")
    p.add_argument("--collection", required=True)
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--no-rerank", action="store_true")
    p.add_argument("--json", action="store_true")
    api(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("context", help="print a budgeted, cited context for a question (sources on stderr)")
    p.add_argument("query")
    p.add_argument("--collection", required=True)
    p.add_argument("--budget", type=int, default=1000, help="budget_tokens (default 1000)")
    p.add_argument("--neighbours", type=int, default=None)
    p.add_argument("--order", choices=["score", "edges"], default=None)
    p.add_argument("--no-rerank", action="store_true")
    p.add_argument("--json", action="store_true")
    api(p)
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("delete", help="delete every document matching a filter (--dry-run: count them first)")
    p.add_argument("--collection", required=True)
    p.add_argument("--filter", default=None,
                   help='JSON, the search filter language: \'{"tag": "old"}\', \'{"year": {"lt": 2020}}\'')
    p.add_argument("--all", action="store_true", help="delete every document of the collection (no --filter)")
    p.add_argument("--dry-run", action="store_true", help="only say which documents would go, and how many")
    api(p)
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("snapshot", help="snapshot the store through the running API, while it serves (admin key)")
    p.add_argument("--collection", default=None, help="one collection (default: every one, at one instant)")
    p.add_argument("--list", action="store_true", help="list the snapshots the API has taken instead")
    api(p)
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("restore", help="restore a snapshot into an empty or new data folder (offline), or a Qdrant "
                       "server's snapshot into a Qdrant server")
    p.add_argument("snapshot", type=Path, metavar="SNAPSHOT", help="the snapshot's folder (its path as listed)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="the embedded store's snapshot: the data folder to restore into, empty or new")
    p.add_argument("--qdrant-url", default=None,
                   help="a Qdrant server's snapshot: the server to restore its collections into (default: "
                   "RAGSERVE_QDRANT__URL; the key: RAGSERVE_QDRANT__API_KEY); none of them may exist there")
    p.add_argument("--expect-sha256", default=None, metavar="HEX",
                   help="refuse, before writing anything, unless the snapshot's manifest has this sha256 (as "
                   "`ragserve snapshot` printed it)")
    p.set_defaults(func=cmd_restore)

    p = sub.add_parser("export", help="download a collection (points, vectors, settings) as a .ragserve.jsonl.gz "
                       "file, through the running API")
    p.add_argument("collection")
    p.add_argument("-o", "--output", default=None, help="the file (default: COLLECTION.ragserve.jsonl.gz)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    api(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", help="upload an export file into a new (or empty) collection, through the running "
                       "API, with no embedding call; run it again to finish one that was cut off")
    p.add_argument("file")
    p.add_argument("--collection", default=None, help="the target collection (default: the exported one's name)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    api(p)
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("worker", help="run an indexing worker (the store must not be open elsewhere)")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("keys", help="API keys")
    ksub = p.add_subparsers(dest="action", required=True)
    kh = ksub.add_parser("hash", help="make a new key and print its keys-file entry (JSON); the key goes to stderr")
    kh.add_argument("--scheme", choices=["sha256", "scrypt"], default="sha256",
                    help="sha256 for generated keys (default); scrypt for a key a person chose (--stdin)")
    kh.add_argument("--stdin", action="store_true", help="hash the key read from stdin instead of a new one")
    kh.add_argument("--scope", action="append", choices=["read", "write", "admin"],
                    help="a scope the key holds (repeatable; default read)")
    kh.add_argument("--collection", action="append", help="a collection the key may reach (repeatable; default all)")
    kh.add_argument("--tenant", metavar="FIELD=VALUE", help="the key's tenant: a metadata field and its value")
    kh.add_argument("--id", help="a label for logs and job ownership")
    kh.set_defaults(func=cmd_keys_hash)

    p = sub.add_parser("optimize", help="build the HNSW index of an embedded-store collection, or with --int8 its "
                       "int8 quantization (store closed)")
    p.add_argument("collection")
    p.add_argument("--int8", action="store_true",
                   help="int8 scalar quantization instead of HNSW: a full scan over int8 copies of the vectors, "
                        "rescored with the float ones (2.8x less CPU than exact search at 100k x 1024; "
                        "docs/store-benchmark.md); the collection stays int8 for later optimizes")
    p.add_argument("--data-dir", type=Path, default=None)
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("store", help="the embedded store's folder")
    ssub = p.add_subparsers(dest="action", required=True)
    mig = ssub.add_parser("migrate", help="bring the store folder (<data-dir>/qdrant, or RAGSERVE_QDRANT__PATH) to "
                          "this ragserve's layout, after a verified backup beside it (store closed)")
    mig.add_argument("--data-dir", type=Path, default=None)
    mig.set_defaults(func=cmd_store_migrate)

    p = sub.add_parser("runners", help="manage the vLLM runners")
    rsub = p.add_subparsers(dest="action", required=True)
    up = rsub.add_parser("up", help="start the runners and wait for Ctrl-C")
    common(up)
    up.add_argument("--print-only", action="store_true", help="print the commands, start nothing")
    up.set_defaults(func=cmd_runners_up)

    plan = rsub.add_parser("plan", help="tensor / pipeline / data / expert parallel choices and their memory")
    common(plan)
    plan.add_argument("--gpus", type=int, required=True, help="GPUs each runner is spread over")
    plan.add_argument("--gpu-memory", type=float, required=True, help="memory of one GPU, GiB")
    plan.add_argument("--nodes", type=int, default=1, help="nodes the GPUs are on (evenly)")
    plan.add_argument("--nvlink", action=argparse.BooleanOptionalAction, default=True,
                      help="GPUs of a node linked by NVLink (default) or only PCIe")
    plan.add_argument("--gpu-memory-utilization", type=float, default=None,
                      help="share of each GPU a runner takes (default: its setting; 0.9 with --model)")
    plan.add_argument("--model", action="append", help="plan this model instead of the profile's (repeatable)")
    plan.add_argument("--max-model-len", type=int, default=None, help="with --model (default: its window)")
    plan.add_argument("--kv-cache-dtype", choices=["auto", "fp8", "fp8_e5m2", "fp8_e4m3"], default=None)
    plan.add_argument("--overhead-gib", type=float, default=1.5,
                      help="per-GPU margin for activations, CUDA graphs, non-torch memory (vLLM measures it)")
    plan.set_defaults(func=cmd_runners_plan)

    p = sub.add_parser("demo", help="runners + API + a sample collection, then keep serving")
    common(p)
    p.add_argument("--no-wait", action="store_true", help="exit after the sample query")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("eval", help="evaluate retrieval on a BEIR-layout dataset through the running API")
    p.add_argument("dataset")
    p.add_argument("--collection", required=True)
    api(p)
    p.add_argument("--split", default="test")
    p.add_argument("--mode", action="append", default=None,
                   help="search mode(s) to evaluate: dense, sparse, hybrid, hybrid:rrf, hybrid:dbsf (repeatable)")
    p.add_argument("--rerank", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--context", action="store_true",
                   help="evaluate POST /v1/context beside plain packing of /v1/search's hits (docs/context.md)")
    p.add_argument("--budget", type=int, default=512, help="with --context: budget_tokens")
    p.add_argument("--neighbours", type=int, default=None, help="with --context: neighbours (default the server's)")
    p.add_argument("--chunk-tokens", type=int, default=64,
                   help="with --context: chunk size when the collection is indexed here (default 64)")
    p.add_argument("--min-relevant", type=int, default=1,
                   help="with --context: only the queries with at least this many relevant documents")
    p.add_argument("--tokenizer-path", default=None,
                   help="with --context: the checkpoint folder whose tokenizer.json counts plain packing (default "
                        "the embedding model's)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("tune-fusion", help="grid-search hybrid fusion settings on a training split")
    p.add_argument("dataset")
    p.add_argument("--collection", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--top", type=int, default=15)
    api(p)
    p.set_defaults(func=cmd_tune_fusion)
    return parser


def main(argv: list[str] | None = None) -> None:
    # SIGTERM unwinds like Ctrl-C, so the runners' context managers stop their processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from pydantic import ValidationError

    from service.auth.keyring import KeyConfigError
    from service.client.errors import APIError, RagserveClientError
    from service.config import UnknownSetting
    from service.runners.launcher import RunnerConfigError, RunnerStartError
    from service.store.errors import StoreError

    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except KeyboardInterrupt:
        print("stopping.", file=sys.stderr)
    except (UnknownSetting, KeyConfigError) as exc:
        print(f"ragserve: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except ValidationError as exc:  # never echo the values: a refused setting may be an API key
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}"
                             for e in exc.errors(include_input=False, include_url=False))
        print(f"ragserve: invalid settings: {problems}", file=sys.stderr)
        raise SystemExit(2) from None
    except (RunnerConfigError, RunnerStartError, StoreError) as exc:
        print(f"ragserve: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except APIError as exc:  # the API refused: its envelope, as it said it
        print(f"ragserve: error {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except RagserveClientError as exc:
        print(f"ragserve: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()

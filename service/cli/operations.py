"""The commands that run here, on this machine's files and processes, with no API in between: restore,
keys, optimize, store migrate, runners and demo."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli.client import add_api_options
from service.cli.settings import add_settings_options, settings_of
from service.config import Settings

if TYPE_CHECKING:
    from service.store.snapshots import SnapshotInfo

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
        settings = settings_of(args)
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
    from service.store import qdrant_server_snapshots
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
            return await qdrant_server_snapshots.restore(args.snapshot, api, expect_sha256=expect)
        finally:
            await api.aclose()

    try:
        return asyncio.run(run()), url
    except RagserveError as exc:
        raise SystemExit(f"ragserve: {exc.message}") from None


def cmd_keys_hash(args: argparse.Namespace) -> None:
    """Print a keys-file entry for a new key (or for one read from stdin), and the key itself once."""
    from service.auth.keys import new_key, scrypt_hash, sha256_hex
    from service.config.keys import ApiKeyEntry, TenantEntry

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
    """Build HNSW (or, with --int8 or --hnsw-int8, the int8 quantization) for a collection of the embedded
    store, in this process, while nothing else has it open."""
    from service.store.edge_optimize import optimize_collection
    from service.store.errors import CollectionNotFound

    if args.online:
        from service.cli.client import cmd_optimize_online

        if args.quantization:
            raise SystemExit(f"ragserve: --{args.quantization} is for the offline optimize (the store closed); a "
                             "running service's builds follow the collection's quantization")
        cmd_optimize_online(args)
        return
    settings = settings_of(args)
    if settings.qdrant.url:
        raise SystemExit("ragserve optimize is for the embedded store; a Qdrant server optimizes by itself")
    try:
        optimize_collection(settings.qdrant_path, args.collection, quantization=args.quantization)
    except CollectionNotFound as exc:
        raise SystemExit(f"ragserve: {exc.message} in {settings.qdrant_path}") from None


def cmd_store_migrate(args: argparse.Namespace) -> None:
    """Bring the embedded store folder to this ragserve's layout, after a verified backup beside it."""
    from service.store.migrate import migrate_store

    settings = settings_of(args)
    if settings.qdrant.url:
        raise SystemExit("ragserve store migrate is for the embedded store; a Qdrant server keeps its own format")
    migrate_store(settings.qdrant_path)


def cmd_runners_up(args: argparse.Namespace) -> None:
    from service.runners.launcher import RunnerConfigError, check_command_lines, runner_specs
    from service.runners.supervisor import supervised

    settings = settings_of(args)
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
            settings = settings_of(args)
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
    run_demo(settings_of(args), stay=not args.no_wait)


def add_restore(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def add_keys(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def add_optimize(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("optimize", help="build the HNSW index of an embedded-store collection, or with --int8 or "
                       "--hnsw-int8 its int8 quantization (store closed)")
    p.add_argument("collection")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--int8", dest="quantization", action="store_const", const="int8",
                      help="int8 scalar quantization instead of HNSW: a full scan over int8 copies of the vectors, "
                           "rescored with the float ones (2.8x less CPU than exact search at 100k x 1024; "
                           "docs/store-benchmark.md); the collection stays quantized for later optimizes")
    mode.add_argument("--hnsw-int8", dest="quantization", action="store_const", const="hnsw-int8",
                      help="int8 scalar quantization and an HNSW graph over it, its candidates rescored with the "
                           "float vectors (docs/store-benchmark.md); the collection stays quantized")
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--online", action="store_true",
                   help="ask the running API to build it in the background while it serves (an admin key), and wait "
                        "for the build to end (docs/background-builds.md)")
    add_api_options(p)
    p.set_defaults(func=cmd_optimize)


def add_store(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("store", help="the embedded store's folder")
    ssub = p.add_subparsers(dest="action", required=True)
    mig = ssub.add_parser("migrate", help="bring the store folder (<data-dir>/qdrant, or RAGSERVE_QDRANT__PATH) to "
                          "this ragserve's layout, after a verified backup beside it (store closed)")
    mig.add_argument("--data-dir", type=Path, default=None)
    mig.set_defaults(func=cmd_store_migrate)


def add_runners(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("runners", help="manage the vLLM runners")
    rsub = p.add_subparsers(dest="action", required=True)
    up = rsub.add_parser("up", help="start the runners and wait for Ctrl-C")
    add_settings_options(up)
    up.add_argument("--print-only", action="store_true", help="print the commands, start nothing")
    up.set_defaults(func=cmd_runners_up)

    plan = rsub.add_parser("plan", help="tensor / pipeline / data / expert parallel choices and their memory")
    add_settings_options(plan)
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


def add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="runners + API + a sample collection, then keep serving")
    add_settings_options(p)
    p.add_argument("--no-wait", action="store_true", help="exit after the sample query")
    p.set_defaults(func=cmd_demo)

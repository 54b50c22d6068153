"""The ``ragserve`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import signal
import sys
from pathlib import Path

from service.config import Settings


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in {
        "profile": getattr(args, "profile", None), "host": getattr(args, "host", None),
        "port": getattr(args, "port", None), "data_dir": getattr(args, "data_dir", None),
    }.items() if v is not None}
    return Settings(**overrides)


def cmd_serve(args: argparse.Namespace) -> None:
    from service.runners.launcher import runner_specs, running
    from service.server import ensure_api_key, serve

    settings = _settings(args)
    key = ensure_api_key(settings)
    if key:
        print(f"Generated API key (development only): {key}", flush=True)
    if args.with_runners:
        with running(runner_specs(settings), log_dir=settings.data_dir / "logs",
                     timeout_s=settings.runners.startup_timeout_s):
            serve(settings)
    else:
        serve(settings)


def cmd_runners_up(args: argparse.Namespace) -> None:
    from service.runners.launcher import runner_specs, running

    settings = _settings(args)
    specs = runner_specs(settings)
    if args.print_only:
        for s in specs:  # copy-pasteable: quoted, with the environment each runner needs
            env = [f"{k}={v}" for k, v in s.env.items()]
            print(shlex.join(["env", *env, *s.command()] if env else s.command()))
        return
    print(f"starting {len(specs)} runner(s) for profile '{settings.profile}'...", flush=True)
    with running(specs, log_dir=settings.data_dir / "logs", timeout_s=settings.runners.startup_timeout_s) as procs:
        for p in procs:
            print(f"  {p.spec.name}: {p.spec.url}  model={p.spec.served_name}  log={p.log_path}", flush=True)
        print("runners healthy; Ctrl-C stops them.", flush=True)
        signal.pause()


def cmd_demo(args: argparse.Namespace) -> None:
    from service.demo.run import run_demo

    if args.profile is None:
        args.profile = "minilm"
    run_demo(_settings(args), stay=not args.no_wait)


def cmd_eval(args: argparse.Namespace) -> None:
    from service.evaluation.dataset import BeirDataset
    from service.evaluation.runner import evaluate_service, format_table

    settings = Settings()
    key = args.api_key or (settings.api_keys[0].get_secret_value() if settings.api_keys else None)
    if not key:
        raise SystemExit("pass --api-key or set RAGSERVE_API_KEYS")
    modes = args.mode or [None]
    reports = asyncio.run(evaluate_service(
        args.url, key, BeirDataset(Path(args.dataset)), args.collection, split=args.split, modes=modes,
        rerank=args.rerank, progress=not args.json,
    ))
    if args.json:
        print(json.dumps([r.__dict__ for r in reports], indent=2))
    else:
        print(format_table(reports))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragserve", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--profile", choices=["qwen3", "minilm"], default=None)
        p.add_argument("--data-dir", type=Path, default=None)
        p.add_argument("--host", default=None)
        p.add_argument("--port", type=int, default=None)

    p = sub.add_parser("serve", help="run the query API")
    common(p)
    p.add_argument("--with-runners", action="store_true", help="also start the vLLM runners")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("runners", help="manage the vLLM runners")
    rsub = p.add_subparsers(dest="action", required=True)
    up = rsub.add_parser("up", help="start the runners and wait for Ctrl-C")
    common(up)
    up.add_argument("--print-only", action="store_true", help="print the commands, start nothing")
    up.set_defaults(func=cmd_runners_up)

    p = sub.add_parser("demo", help="runners + API + a sample collection, then keep serving")
    common(p)
    p.add_argument("--no-wait", action="store_true", help="exit after the sample query")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("eval", help="evaluate retrieval on a BEIR-layout dataset through the running API")
    p.add_argument("dataset")
    p.add_argument("--collection", required=True)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--api-key", default=None)
    p.add_argument("--split", default="test")
    p.add_argument("--mode", action="append", default=None, help="search mode(s) to evaluate")
    p.add_argument("--rerank", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_eval)
    return parser


def main(argv: list[str] | None = None) -> None:
    # SIGTERM unwinds like Ctrl-C, so the runners' context managers stop their processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from service.runners.launcher import RunnerConfigError, RunnerStartError

    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except KeyboardInterrupt:
        print("stopping.", file=sys.stderr)
    except (RunnerConfigError, RunnerStartError) as exc:
        print(f"ragserve: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()

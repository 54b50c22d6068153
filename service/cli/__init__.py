"""The ``ragserve`` command."""

# The package docstring above is the parser's description (``ragserve --help``). The commands live by what they
# talk to: serve.py (the long-running processes), client.py and transfer.py (a running API, through
# service.client), operations.py (this machine's files and processes, no API). Each module adds its own
# subparsers; build_parser only sets their order, which is the order ``ragserve --help`` lists them in.

from __future__ import annotations

import argparse
import signal
import sys

from service.cli import client, operations, querylog, serve, transfer

COMMANDS = (
    serve.add_serve, client.add_index, client.add_search, client.add_context, client.add_feedback,
    client.add_delete, client.add_snapshot, operations.add_restore, transfer.add_export, transfer.add_import,
    serve.add_worker, operations.add_keys, operations.add_optimize, operations.add_store, operations.add_runners,
    operations.add_demo, client.add_eval, client.add_tune_fusion, querylog.add_querylog,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragserve", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
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


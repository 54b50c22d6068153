"""``ragserve serve`` and ``ragserve worker``: the long-running processes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from service.cli.settings import add_settings_options, settings_of
from service.config import Settings


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

    settings = settings_of(args)
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


def cmd_worker(args: argparse.Namespace) -> None:
    _observe(Settings())
    run_worker()


def run_worker() -> None:
    """``ragserve worker``: claim and run jobs until SIGTERM or SIGINT, which hand the running job back to
    the queue (``JobQueue.release``) so another worker resumes it at once."""
    import logging
    import signal

    from indexer.services import open_worker_services
    from indexer.worker import Worker
    from service.startup import freeze_startup_objects

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()

    async def main() -> None:
        services = await open_worker_services(settings)
        freeze_startup_objects()
        try:
            worker = Worker(services.jobs, services.store, services.embedder, settings, services.fetcher,
                            services.generator)
            task = asyncio.create_task(worker.run_forever(asyncio.Event()))
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, task.cancel)
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            await services.aclose()

    asyncio.run(main())


def add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the query API")
    add_settings_options(p)
    p.add_argument("--with-runners", action="store_true",
                   help="also start the vLLM runners (and restart one that exits, with backoff)")
    p.add_argument("--with-worker", action="store_true",
                   help="also run the indexing worker in this process (needed with the embedded store)")
    p.add_argument("--workers", type=int, default=None,
                   help="API processes on the one port (default: $RAGSERVE_WORKERS, else 1); see docs/api-processes.md")
    p.set_defaults(func=cmd_serve)


def add_worker(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("worker", help="run an indexing worker (the store must not be open elsewhere)")
    p.set_defaults(func=cmd_worker)

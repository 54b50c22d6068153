"""Running the API: keys, uvicorn, and the in-thread server the demo uses."""

from __future__ import annotations

import os
import secrets
import shutil
import threading
import time
from collections.abc import Mapping

import httpx
import uvicorn
from fastapi import FastAPI
from pydantic import SecretStr

from service.api.app import create_app
from service.config import Settings
from service.quality.log import quality_metrics_dir


def ensure_api_key(settings: Settings) -> str | None:
    """In development, generate a key when none is configured and return it (to print); in production,
    refuse to start without one."""
    if settings.api_keys or settings.api_key_hashes or settings.api_keys_file:
        return None
    if settings.environment == "production":
        raise SystemExit("RAGSERVE_API_KEYS is required in production")
    key = "rs-" + secrets.token_urlsafe(24)
    settings.api_keys = [SecretStr(key)]
    return key


def preflight(settings: Settings) -> None:
    """Refuse to start, with a message that names the folder, where the embedded store cannot be opened."""
    if not settings.qdrant.url:
        from service.store.layout import probe_store

        probe_store(settings.qdrant_path)


def serve(settings: Settings, *, with_worker: bool = False) -> None:
    preflight(settings)
    if settings.workers > 1:
        serve_processes(settings, with_worker=with_worker)
        return
    # log_config=None: uvicorn leaves logging as service.observability.logs configured it (its loggers
    # propagate to our handler, so its lines carry the request id and the chosen format too).
    uvicorn.run(create_app(settings, with_worker=with_worker), host=settings.host, port=settings.port,
                log_level=settings.log_level.lower(), access_log=False, log_config=None)


def serve_processes(settings: Settings, *, with_worker: bool) -> None:
    """``settings.workers`` API processes on one port (uvicorn's supervisor: it binds the port, starts them with
    :func:`api_process_app` or :func:`api_process_app_with_worker`, and starts again one that dies). On the
    embedded store, the store owner starts first and outlives them (docs/api-processes.md)."""
    owner = None
    if not settings.qdrant.url:
        from service.store.factory import edge_options
        from service.store.owner import StoreOwner

        owner = StoreOwner(settings.qdrant_path.resolve(), edge_options(settings))
        owner.start()
        settings.qdrant.edge_socket = owner.socket
    os.environ.update(process_environment(settings))  # what the API processes build their settings from
    # The quality counts the processes publish to each other (service/quality/metrics.py): a new serve starts
    # them from zero, as one process's counters start at its start.
    shutil.rmtree(quality_metrics_dir(settings), ignore_errors=True)
    target = "api_process_app_with_worker" if with_worker else "api_process_app"
    try:
        uvicorn.run(f"service.server:{target}", factory=True, workers=settings.workers, host=settings.host,
                    port=settings.port, log_level=settings.log_level.lower(), access_log=False, log_config=None)
    finally:
        if owner is not None:
            owner.stop()


def process_environment(settings: Settings) -> dict[str, str]:
    """The settings ``serve`` decided beyond its environment (its options, a generated key, the owner's socket),
    as the variables an API process reads them from."""
    env = {"RAGSERVE_PROFILE": settings.profile, "RAGSERVE_DATA_DIR": str(settings.data_dir.resolve()),
           "RAGSERVE_HOST": settings.host, "RAGSERVE_PORT": str(settings.port),
           "RAGSERVE_WORKERS": str(settings.workers)}
    if settings.qdrant.edge_socket is not None:
        env["RAGSERVE_QDRANT__EDGE_SOCKET"] = str(settings.qdrant.edge_socket)
    if settings.api_keys and not os.environ.get("RAGSERVE_API_KEYS"):  # the development key serve generated
        env["RAGSERVE_API_KEYS"] = ",".join(k.get_secret_value() for k in settings.api_keys)
    return env


def _api_process(with_worker: bool) -> FastAPI:
    from service.observability.logs import configure_logging
    from service.observability.tracing import configure_tracing

    settings = Settings()
    configure_logging(settings.log_format, settings.log_level)
    configure_tracing(settings.otel)
    return create_app(settings, with_worker=with_worker)


def api_process_app() -> FastAPI:
    """One of ``serve --workers N``'s API processes (uvicorn calls it in each)."""
    return _api_process(False)


def api_process_app_with_worker() -> FastAPI:
    """One of ``serve --workers N --with-worker``'s API processes: a candidate to run the indexing worker
    (:mod:`indexer.election`)."""
    return _api_process(True)


class BackgroundServer:
    """uvicorn in a thread, for the demo: the main thread indexes and queries through HTTP meanwhile.
    ``transports`` (tests only) replaces the network edge of runner clients, as in ``create_app``."""

    def __init__(self, settings: Settings, *, with_worker: bool = False,
                 transports: Mapping[str, httpx.AsyncBaseTransport] | None = None) -> None:
        self.settings = settings
        app = create_app(settings, with_worker=with_worker, transports=transports)
        config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="ragserve-api", daemon=True)

    def start(self, timeout_s: float = 30.0) -> None:
        preflight(self.settings)
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

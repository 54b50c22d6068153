"""Running the API: keys, uvicorn, and the in-thread server the demo uses."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Mapping

import httpx
import uvicorn
from pydantic import SecretStr

from service.api.app import create_app
from service.config import Settings


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
    # log_config=None: uvicorn leaves logging as service.observability.logs configured it (its loggers
    # propagate to our handler, so its lines carry the request id and the chosen format too).
    uvicorn.run(create_app(settings, with_worker=with_worker), host=settings.host, port=settings.port,
                log_level=settings.log_level.lower(), access_log=False, log_config=None)


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

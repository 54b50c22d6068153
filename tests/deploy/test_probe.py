"""deploy/probe.py, the container health check, against a stand-in API on loopback."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType

import pytest

from tests.deploy.manifests import DEPLOY
from tests.support.runners import free_port


def _load_probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ragserve_probe", DEPLOY / "probe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe = _load_probe()


class FakeApi(BaseHTTPRequestHandler):
    """/health open; /ready 200 with the right key, 401 without; /down 503 like a runner being away."""

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        auth = self.headers.get("Authorization")
        if self.path == "/health":
            status = 200 if auth is None else 400  # the liveness probe must not send a key
        elif self.path == "/ready":
            status = 200 if auth == "Bearer first-key-0123456789" else 401
        else:
            status = 503
        body = b'{"status": "x"}'
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass


@pytest.fixture(scope="module")
def api_port() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield str(server.server_address[1])
    server.shutdown()
    server.server_close()


KEYS = " first-key-0123456789 , second-key-0123456789"


def test_health_needs_no_key(api_port: str) -> None:
    assert probe.probe("/health", port=api_port, keys=KEYS, timeout_s=2) == 0


def test_ready_sends_the_first_key(api_port: str) -> None:
    assert probe.probe("/ready", port=api_port, keys=KEYS, timeout_s=2) == 0
    assert probe.probe("/ready", port=api_port, keys="other-key-0123456789", timeout_s=2) == 1


def test_error_status_fails(api_port: str) -> None:
    assert probe.probe("/down", port=api_port, keys=KEYS, timeout_s=2) == 1


def test_nothing_listening_fails() -> None:
    assert probe.probe("/health", port=str(free_port()), keys="", timeout_s=2) == 1


def test_main_reads_port_and_keys_from_env(api_port: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSERVE_PORT", api_port)
    monkeypatch.setenv("RAGSERVE_API_KEYS", KEYS)
    assert probe.main(["probe.py", "/ready"]) == 0
    assert probe.main(["probe.py"]) == 0  # /health by default

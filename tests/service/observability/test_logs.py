from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from service.config import Settings
from service.observability.context import RequestContext, accept_request_id, bind, unbind
from service.observability.logs import configure_logging
from tests.support.tiers import patient

log = logging.getLogger("ragserve.test")


def test_json_lines_carry_the_request_context(log_stream: io.StringIO) -> None:
    token = bind(RequestContext("req-1", key_id="kb-reader"))
    try:
        log.info("inside %s", "a request", extra={"collection": "kb"})
    finally:
        unbind(token)
    log.warning("outside")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    inside, outside, failed = (json.loads(line) for line in log_stream.getvalue().splitlines())
    assert {k: inside[k] for k in ("level", "logger", "message", "request_id", "key_id", "collection")} == {
        "level": "INFO", "logger": "ragserve.test", "message": "inside a request", "request_id": "req-1",
        "key_id": "kb-reader", "collection": "kb"}
    assert inside["time"].endswith("+00:00") and "trace_id" not in inside
    assert outside["request_id"] == "-" and "key_id" not in outside
    assert failed["exception"].splitlines()[-1] == "ValueError: boom"


def test_text_lines_carry_the_request_id() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    try:
        configure_logging("text", "INFO", stream=stream)
        token = bind(RequestContext("req-2"))
        log.info("hello")
        unbind(token)
        logging.getLogger("ragserve.test").debug("below the level")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(" INFO ragserve.test [req-2] hello")


def test_only_sane_request_ids_are_taken() -> None:
    assert accept_request_id("abc-123_x.y:z") == "abc-123_x.y:z"
    for bad in (None, "", "a b", "x\ninjected line", "é", "a" * 129):
        made = accept_request_id(bad)
        assert made != bad and len(made) == 32 and int(made, 16) >= 0


def test_ragserve_worker_prints_its_log_lines(tmp_path: Path, minilm_settings: Settings) -> None:
    """Before, no logging was configured and the worker's lines never printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSERVE_")}
    env.update(RAGSERVE_PROFILE="minilm", RAGSERVE_DATA_DIR=str(tmp_path), RAGSERVE_LOG_FORMAT="json",
               RAGSERVE_RUNNERS__EMBED_URL=minilm_settings.runners.embed_url)
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "worker"], env=env, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + patient(120)  # a liveness bound only: another process's first log line
        assert proc.stderr is not None
        line = ""
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if '"ragserve.worker"' in line or proc.poll() is not None:
                break
        record = json.loads(line)
        assert record["logger"] == "ragserve.worker" and record["message"].startswith("worker ")
        assert record["message"].endswith(" polling SqliteJobQueue") and record["request_id"] == "-"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


def test_library_chatter_stays_below_the_terminal_unless_debugging(log_stream: io.StringIO) -> None:
    """httpx's line per runner call and the MCP session manager's start and stop say nothing to an operator;
    their warnings still come through, and at DEBUG everything does."""
    httpx_log, mcp_log = logging.getLogger("httpx"), logging.getLogger("mcp.server.streamable_http_manager")
    httpx_log.info('HTTP Request: POST http://127.0.0.1:8101/v1/embeddings "HTTP/1.1 200 OK"')
    mcp_log.info("StreamableHTTP session manager started")
    httpx_log.warning("a warning of theirs")
    assert [json.loads(line)["message"] for line in log_stream.getvalue().splitlines()] == ["a warning of theirs"]
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    debug = io.StringIO()
    try:
        configure_logging("text", "DEBUG", stream=debug)
        httpx_log.info("HTTP Request: at DEBUG")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        configure_logging("json", "INFO", stream=log_stream)  # the fixture's levels again
        root.handlers[:] = saved[0]
    assert "HTTP Request: at DEBUG" in debug.getvalue()

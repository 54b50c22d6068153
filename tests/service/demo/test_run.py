"""What the offline demo prints is what it means to print: the demo's own lines on stdout and nothing on
stderr (no library's warnings or INFO chatter), run as its own process with Python's default warning filters,
as a user runs it. Before, the MCP SDK configured the root logger when the app started, and every INFO line
of every library (httpx's "HTTP Request: ...", the worker's) reached the terminal.

The runners are the session's (``ragserve demo`` starts its own first: ``service/demo/run.py``); the rest is
the demo's own code: the API with its worker in a thread, the sample indexed through an ingest job, a query.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.config import Settings
from tests.support.runners import free_port

ROOT = Path(__file__).resolve().parents[3]
DEMO = """
import sys
from service.config import Settings
from service.demo.run import SAMPLE_QUERY, index_and_query
from service.server import BackgroundServer, ensure_api_key

settings = Settings(profile="minilm", data_dir=sys.argv[1], port=int(sys.argv[2]), runners={"embed_url": sys.argv[3]})
key = ensure_api_key(settings)
server = BackgroundServer(settings, with_worker=True)
server.start()
try:
    result = index_and_query(f"http://{settings.host}:{settings.port}", key, "sample", SAMPLE_QUERY)
    print(f"hits {len(result['hits'])}")
finally:
    server.stop()
"""


def test_the_demo_prints_its_answer_and_nothing_else(tmp_path: Path, minilm_settings: Settings) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSERVE_") and k != "PYTHONWARNINGS"}
    done = subprocess.run(
        [sys.executable, "-c", DEMO, str(tmp_path / "data"), str(free_port()), minilm_settings.runners.embed_url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "indexed 16 documents into 'sample' (job succeeded)" in done.stdout and "hits 3" in done.stdout
    assert done.stderr == "", f"the demo printed to the terminal what means nothing to a user:\n{done.stderr}"

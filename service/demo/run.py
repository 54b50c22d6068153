"""``ragserve demo``: start the runners and the API on the embedded store, index a sample collection
through the API, answer a query, and keep serving until Ctrl-C."""

from __future__ import annotations

import threading
from importlib import resources
from pathlib import Path
from typing import Any

from service.client import Client
from service.config import Settings
from service.runners.launcher import runner_specs
from service.runners.supervisor import supervised
from service.server import BackgroundServer, ensure_api_key

SAMPLE_QUERY = "How do plants turn sunlight into energy?"


def index_and_query(base_url: str, key: str, collection: str, query: str) -> dict[str, Any]:
    """Index the sample through an ingest job (upload → worker → Qdrant), then query it."""
    sample = (resources.files("service.demo") / "sample.jsonl").read_bytes()
    with Client(base_url, key) as client:
        client.ensure_collection(collection)
        job = client.ingest_files(collection, {"sample.jsonl": sample}, options={"source_name": "demo-sample"},
                                  poll_s=0.2)
        c = job.counts
        print(f"indexed {c.documents_indexed + c.documents_unchanged} documents into '{collection}' "
              f"(job {job.state})")
        return client.search(collection, query, top_k=3).model_dump()


def run_demo(settings: Settings, *, collection: str = "sample", query: str = SAMPLE_QUERY,
             stay: bool = True) -> dict[str, Any]:
    generated = ensure_api_key(settings)
    key = generated or settings.api_keys[0].get_secret_value()
    specs = runner_specs(settings)
    print(f"starting {len(specs)} vLLM runner(s) for profile '{settings.profile}' (first start: ~1 minute)...")
    with supervised(specs, log_dir=Path(settings.data_dir) / "logs", timeout_s=settings.runners.startup_timeout_s):
        for s in specs:
            print(f"  {s.name} runner: {s.url} ({s.served_name})")
        server = BackgroundServer(settings, with_worker=True)
        server.start()
        base_url = f"http://{settings.host}:{settings.port}"
        try:
            result = index_and_query(base_url, key, collection, query)
            print(f"\nquery: {query}")
            for hit in result["hits"]:
                print(f"  {hit['rank']}. [{hit['score']:.3f}] {hit['doc_id']}: {hit['text'][:90]}")
            print(f"  timings (ms): {result['timings_ms']}")
            print(f"\nragserve is listening on {base_url}  (OpenAPI: {base_url}/docs)")
            print(f"API key: {key}")
            print(f"playground: {base_url}/ui  (paste the key, pick a collection, search; "
                  "the Jobs tab takes dropped files)")
            print(f"index your own files: RAGSERVE_API_KEY={key} .venv/bin/ragserve index ./my-docs --collection kb")
            print(f"try: curl -s {base_url}/v1/search -H 'Authorization: Bearer {key}' "
                  f"-H 'Content-Type: application/json' -d '{{\"collection\": \"{collection}\", "
                  f"\"query\": \"what is BM25?\"}}'")
            if stay:
                print("Ctrl-C stops the API and the runners.")
                threading.Event().wait()
            return result
        finally:
            server.stop()

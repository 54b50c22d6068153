"""The runners' CPU core plan end to end (``RAGSERVE_RUNNERS__CPU_PLAN``): indexing tokens/s, and search p50/p99 idle
and during an indexing job, with each plan, in alternating rounds on this machine.

    python -m tests.bench.bench_core_plan [--profile minilm|qwen3-tiny] [--plans vllm,auto] [--rounds 2]
        [--quiet-wait on|off|on,off] [--docs 600] [--rate 4] [--idle-s 20] [--json out.json]

Each round starts the profile's runners with one plan (the launcher's own specs, on free ports), reads the cores
their workers bound from their logs, starts ``ragserve serve --with-worker`` (embedded store) against them, seeds a
collection of 200 SciFact documents, sends searches at ``--rate`` per second for ``--idle-s`` seconds (open loop),
then submits ``--docs`` other SciFact documents as one ingest job and keeps searching at the same rate until it
ends (the query-embedding cache off: every search embeds). The runners, the API, its store process, the worker and this load generator share the machine's cores, as
they do on a one-host install. Indexing tokens/s is the embedding runner's ``vllm:prompt_tokens_total`` over the
job, divided by the job's wall time (the searches' few query tokens included). ``qwen3-tiny`` is the tests'
tiny random Qwen3 checkpoint as both the embedder and the reranker (searches rerank 20 candidates); its compute is
small, so it shows the plan's effect on the runners' other processes more than on the model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from service.config import Settings
from service.profiles import MINILM, QWEN3
from service.runners.launcher import runner_specs, running
from tests.bench.bench_lanes import searches, summary
from tests.support.runners import free_port
from tests.support.vllm_metrics import counters

KEY = "bench-key-0123456789abcdef"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact" / "corpus.jsonl"
QUERIES = ["what causes myelodysplastic syndromes?", "does DNA methylation change with age?",
           "white matter development in newborns", "reverse transcription of ID elements",
           "which genes are expressed in the immune system?", "vitamin D and bone density"]


def corpus(n: int, skip: int = 0) -> list[dict[str, str]]:
    docs = []
    with open(SCIFACT) as f:
        for i, line in enumerate(f):
            if i < skip:
                continue
            row = json.loads(line)
            docs.append({"id": row["_id"], "text": f"{row['title']}\n\n{row['text']}"})
            if len(docs) == n:
                break
    return docs


def bound_cores(log: Path) -> list[str]:
    return re.findall(r"core ids=(\[[0-9, ]*\])", log.read_text(errors="replace"))


def serve(data: Path, env_extra: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "RAGSERVE_DATA_DIR": str(data), "RAGSERVE_API_KEYS": KEY,
           "RAGSERVE_INDEXER__POLL_S": "0.1",
           "RAGSERVE_QUERY_CACHE__MAX_BYTES": "0",  # the searches repeat their queries: every one must embed
           **env_extra}
    log = open(data / "serve.log", "wb")  # noqa: SIM115 - the child's
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--with-worker", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("ragserve did not start: " + (data / "serve.log").read_text()[-2000:])


async def measure(url: str, embed_url: str, args: argparse.Namespace, rerank: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"collection": "kb", "top_k": 5,
                            "rerank": {"enabled": True, "top_n": 20} if rerank else {"enabled": False}}
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300) as client:
        for name in ("kb", "bulk"):
            r = await client.post("/v1/collections", json={"name": name})
            assert r.status_code == 201, r.text
        r = await client.post("/v1/collections/kb/documents", json={"documents": corpus(200)})
        assert r.status_code == 200, r.text
        await searches(client, args.rate, time.monotonic() + 3, queries=QUERIES, body=body)  # warm up
        idle = await searches(client, args.rate, time.monotonic() + args.idle_s, queries=QUERIES, body=body)

        jsonl = "\n".join(json.dumps(d) for d in corpus(args.docs, skip=200)).encode()
        before = (await counters(embed_url, [PROMPT_TOKENS]))[PROMPT_TOKENS]
        r = await client.post("/v1/collections/bulk/ingest", files=[("files", ("docs.jsonl", jsonl))])
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        started = time.monotonic()

        async def finished() -> dict[str, Any]:
            while True:
                job = (await client.get(f"/v1/jobs/{job_id}")).json()
                if job["state"] in ("succeeded", "failed", "cancelled"):
                    return job  # type: ignore[no-any-return]
                await asyncio.sleep(0.25)

        job_task = asyncio.ensure_future(finished())
        busy = await searches(client, args.rate, job_task, queries=QUERIES, body=body)
        job = job_task.result()
        took = time.monotonic() - started
        tokens = (await counters(embed_url, [PROMPT_TOKENS]))[PROMPT_TOKENS] - before
    return {"idle": summary(*idle), "during_job": summary(*busy), "job_state": job["state"],
            "job_s": round(took, 1), "tokens": int(tokens), "tokens_per_s": round(tokens / took)}


def one_round(plan: str, quiet_wait: bool, args: argparse.Namespace, tiny: Path | None,
              root: Path) -> dict[str, Any]:
    ports = [free_port(), free_port()]
    runners: dict[str, Any] = {"embed_url": f"http://127.0.0.1:{ports[0]}", "cpu_plan": plan,
                               "cpu_quiet_wait": quiet_wait}
    if tiny is not None:
        runners |= {"rerank_url": f"http://127.0.0.1:{ports[1]}", "embed_model_path": str(tiny),
                    "rerank_model_path": str(tiny), "max_model_len": 512}
        settings = Settings(profile="qwen3", runners=runners, generation={"enabled": False})
        specs = runner_specs(settings, QWEN3)
    else:
        specs = runner_specs(Settings(profile="minilm", runners=runners), MINILM)
    logs = root / f"logs-{plan}-{time.monotonic_ns()}"
    with running(specs, log_dir=logs, timeout_s=900):
        cores = {s.label: bound_cores(logs / f"{s.label}.log") for s in specs}
        env = {f"RAGSERVE_RUNNERS__{k.upper()}": str(v) for k, v in runners.items()}  # paths: the API's tokenizer
        env["RAGSERVE_PROFILE"] = "qwen3" if tiny is not None else "minilm"
        if tiny is not None:
            env["RAGSERVE_RUNNERS__MAX_MODEL_LEN"] = "512"
            env["RAGSERVE_GENERATION__ENABLED"] = "false"
        data = Path(tempfile.mkdtemp(prefix="data-", dir=root))
        proc, url = serve(data, env)
        try:
            result = asyncio.run(measure(url, specs[0].url, args, rerank=tiny is not None))
        finally:
            proc.terminate()
            proc.wait(60)
    return {"plan": plan, "quiet_wait": quiet_wait, "cores": cores, "runner_env": {s.label: {k: v for k, v in s.env.items()
                                                                   if k.startswith("VLLM_CPU_")} for s in specs},
            **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=["minilm", "qwen3-tiny"], default="minilm")
    parser.add_argument("--plans", default="vllm,auto")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quiet-wait", default="on", help="the runners' RAGSERVE_RUNNERS__CPU_QUIET_WAIT: on, off "
                        "or on,off (each plan with each, in turn)")
    parser.add_argument("--docs", type=int, default=600)
    parser.add_argument("--rate", type=float, default=4.0, help="searches per second")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-core-plan-") as tmp:
        root = Path(tmp)
        tiny = None
        if args.profile == "qwen3-tiny":
            from tests.support.tiny_qwen3 import build_tiny_qwen3

            tiny = build_tiny_qwen3(root / "tiny-qwen3")
        for r in range(args.rounds):
            for plan, quiet in [(p, q) for p in args.plans.split(",") for q in args.quiet_wait.split(",")]:
                row = {"round": r + 1, **one_round(plan, quiet == "on", args, tiny, root)}
                rows.append(row)
                print(f"round {r + 1} plan {plan:<6} quiet wait {quiet:<3} cores {row['cores']}: {row['tokens_per_s']:,} tokens/s "
                      f"({row['tokens']:,} in {row['job_s']} s); search p50/p99 idle "
                      f"{row['idle']['p50_ms']}/{row['idle']['p99_ms']} ms, during the job "
                      f"{row['during_job']['p50_ms']}/{row['during_job']['p99_ms']} ms "
                      f"(statuses {row['during_job']['statuses']})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"profile": args.profile, "docs": args.docs, "rate": args.rate,
                                         "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

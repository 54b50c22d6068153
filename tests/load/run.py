"""Load test of ``POST /v1/search`` with Locust: a real ``ragserve serve`` process (minilm profile, the
embedded Qdrant Edge store in a temporary folder, the MiniLM embedding runner) over SciFact abstracts, and
Locust headless on loopback in a process of its own (tests/load/locustfile.py).

    python -m tests.load.run --full --out docs/load.json    # the full form (docs/load.md)
    python -m tests.load.run                                 # the short form (what CI runs: tests/load)

Stages, each a Locust run of its own against the same server:

1. ``calibrate``: closed loop (each user sends when its last answer came), ``--users`` users: the most the
   server answers at this concurrency, X requests/s.
2. ``sustained``: open loop at R requests/s (``--rate``, or a share of X): the rate held. The full form
   checks p99 < 1 s with no error and, if not, tries again at 3/4 of the rate (at most ``--attempts``
   times).
3. ``overload``: open loop at 4 x R. More arrives than the server can answer; the answer to that must be 429
   with ``Retry-After`` (a query that waited ``RAGSERVE_UPSTREAM__ACQUIRE_TIMEOUT_S`` for a slot toward the
   runner), never a 5xx, a connection error or a client timeout, and memory must stay bounded.

For each stage: throughput (200s per second), p50/p99 of the 200s and of every answer (from the scheduled
send time), answers by status, 429s that carried ``Retry-After``, the most requests in flight, the load
generator's lag, and the peak RSS of the API's processes (the API and, by default, its embedded store's own
process: VmRSS summed and sampled every 0.2 s, and VmHWM from /proc/<pid>/status summed).

The embedding runner is ``--embed-url`` (default ``$RAGSERVE_TEST_MINILM_URL``, or one started here).
The short form sets small query slots (``SHORT.server_env``) so that overload shows within seconds, and
holds 3/4 of the calibrated rate, so that its overload (4 x) is three times what the server answered while
calibrating. On a shared machine whose other work stopped after the calibration, that may still be answered
in full; the short form then runs the overload again at twice the rate (at most twice).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.evaluation.dataset import BeirDataset
from tests.support.process import ServeProcess, process_tree, ragserve_serve, tree_peak_rss_bytes, tree_rss_bytes

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
COLLECTION = "scifact"
MIB = 1024 * 1024


@dataclass(frozen=True)
class LoadPlan:
    users: int
    docs: int
    max_chars: int | None
    """Documents are cut to this many characters (None: whole abstracts)."""
    calibrate_s: float
    stage_s: float
    sustain_share: float
    """R = this share of the calibrated throughput, unless a rate is given."""
    overload_factor: float = 4.0
    attempts: int = 1
    """Sustained runs tried, each at 3/4 of the rate before, until p99 < 1 s with no error."""
    p99_target_s: float = 1.0
    rss_growth_mib: float = 300
    """The API's resident memory may grow at most this much above its idle size during the stages."""
    escalations: int = 0
    """Overload runs added, each at twice the rate before, while an overload run was answered without one 429
    (the machine answered more than it did while calibrating: its other work stopped in the meantime)."""
    server_env: Mapping[str, str] = field(default_factory=dict)


FULL = LoadPlan(users=64, docs=3000, max_chars=None, calibrate_s=30, stage_s=60, sustain_share=0.8, attempts=3)
SHORT = LoadPlan(users=16, docs=60, max_chars=300, calibrate_s=3, stage_s=4, sustain_share=0.75, escalations=2,
                 rss_growth_mib=150,
                 server_env={"RAGSERVE_UPSTREAM__MAX_CONCURRENCY": "4", "RAGSERVE_UPSTREAM__ACQUIRE_TIMEOUT_S": "0.5"})


@dataclass
class StageResult:
    name: str
    mode: str
    """``closed`` (users wait for their answers) or ``open`` (a fixed arrival rate)."""
    users: int
    offered_rps: float | None
    duration_s: float
    requests: int
    by_status: dict[str, int]
    retry_after_429: int
    """429 answers that carried a Retry-After header of a positive whole number of seconds."""
    ok_rps: float
    """200 answers per second of the stage."""
    answered_rps: float
    p50_ms: float
    p99_ms: float
    """Of the 200 answers, from the scheduled send time."""
    p50_all_ms: float
    p99_all_ms: float
    max_ms: float
    peak_in_flight: int
    lag_p99_ms: float
    """How far the load generator's sends fell behind their schedule (open loop)."""
    rss_before_mib: float
    rss_peak_mib: float
    """The largest VmRSS sampled during the stage."""
    hwm_mib: float
    """VmHWM after the stage: the process's peak since it started."""
    locust_cpu_warning: bool
    load_average: float
    """The machine's 1-minute load average at the end of the stage (other work shares these CPUs)."""
    server_ms: dict[str, float] = field(default_factory=dict)
    """p50 / p99 of the server's own timings of the 200s: embed (the wait for a query slot included),
    search (the store), total (the handler)."""

    @property
    def server_errors(self) -> int:
        return sum(n for s, n in self.by_status.items() if s == "0" or s.startswith("5"))

    @property
    def error_rate(self) -> float:
        return 1 - self.by_status.get("200", 0) / self.requests if self.requests else 0.0


@dataclass
class LoadResult:
    plan: dict[str, Any]
    docs: int
    points: int
    index_s: float
    rss_idle_mib: float
    stages: list[StageResult]
    sustained_rps: float
    machine: dict[str, Any]
    api_pid: int
    pids: list[int] = field(default_factory=list)
    """The API's process tree as it served: the API and, by default, its embedded store's own process."""

    def stage(self, name: str) -> StageResult:
        return next(s for s in reversed(self.stages) if s.name == name)


# --- the corpus and the server ---------------------------------------------------------------------------


def corpus(n: int, max_chars: int | None) -> list[dict[str, Any]]:
    docs = []
    for doc in BeirDataset(SCIFACT).corpus():
        if len(docs) == n:
            break
        docs.append({**doc, "text": doc["text"][:max_chars] if max_chars else doc["text"]})
    return docs


def queries() -> list[str]:
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def fill(api: ServeProcess, docs: list[dict[str, Any]], batch: int = 100) -> int:
    with httpx.Client(base_url=api.url, headers=api.headers, timeout=600) as client:
        r = client.post("/v1/collections", json={"name": COLLECTION})
        assert r.status_code == 201, r.text
        for start in range(0, len(docs), batch):
            r = client.post(f"/v1/collections/{COLLECTION}/documents", json={"documents": docs[start:start + batch]})
            assert r.status_code == 200, r.text
        r = client.get(f"/v1/collections/{COLLECTION}")
        assert r.status_code == 200, r.text
        return int(r.json()["points"])


class RssSampler:
    """VmRSS of ``pid`` and its descendants every ``interval_s`` from a thread, while in the ``with`` block."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.peak = tree_rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, tree_rss_bytes(self.pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.peak = max(self.peak, tree_rss_bytes(self.pid))


# --- one Locust run --------------------------------------------------------------------------------------


def locust(api: ServeProcess, work: Path, name: str, *, users: int, rate: float, duration_s: float,
           query_file: Path) -> tuple[dict[str, Any], str]:
    """Run the locustfile headless in a process (and session) of its own; its per-request records."""
    out = work / f"{name}.records.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, "LOAD_KEY": api.key, "LOAD_COLLECTION": COLLECTION, "LOAD_QUERIES": str(query_file),
           "LOAD_RATE": str(rate), "LOAD_DURATION_S": str(duration_s), "LOAD_USERS": str(users),
           "LOAD_OUT": str(out)}
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", str(users),
               "-r", str(users), "-t", f"{int(duration_s + 60)}s", "-H", api.url, "--only-summary",
               "--loglevel", "WARNING", "--exit-code-on-error", "0", "--stop-timeout", "5"]
    log = work / f"{name}.locust.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=duration_s + 120)
        finally:
            if proc.poll() is None:  # never leave a load generator behind
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = log.read_text()
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"locust exited with {proc.returncode} for {name}: {text[-3000:]}")
    return json.loads(out.read_text()), text


def summarize(name: str, data: dict[str, Any], *, rss_before: int, rss_peak: int, hwm: int, cpu_warning: bool,
              users: int, mode: str, load_average: float = 0.0) -> StageResult:
    records = data["records"]
    duration = float(data["duration_s"])
    status = Counter(str(r[2]) for r in records)
    latency = np.asarray([r[1] for r in records], dtype=np.float64) * 1000
    ok = np.asarray([r[1] for r in records if r[2] == 200], dtype=np.float64) * 1000
    retry_after = sum(1 for r in records if r[2] == 429 and r[3] is not None and str(r[3]).isdigit()
                      and int(r[3]) >= 1)
    # In flight: each request from its actual send to its answer.
    events = sorted([(r[0] + r[4], 1) for r in records] + [(r[0] + r[1], -1) for r in records],
                    key=lambda e: (e[0], e[1]))
    peak, now = 0, 0
    for _, delta in events:
        now += delta
        peak = max(peak, now)

    def pct(a: np.ndarray, q: float) -> float:
        return round(float(np.percentile(a, q)), 1) if a.size else 0.0

    server: dict[str, float] = {}
    for part in ("embed", "search", "total"):
        values = np.asarray([r[5][part] for r in records if r[2] == 200 and r[5] and part in r[5]], dtype=np.float64)
        server[f"{part}_p50"], server[f"{part}_p99"] = pct(values, 50), pct(values, 99)

    return StageResult(
        name=name, mode=mode, users=users, offered_rps=float(data["rate"]) or None, duration_s=duration,
        requests=len(records), by_status=dict(sorted(status.items())), retry_after_429=retry_after,
        ok_rps=round(ok.size / duration, 1), answered_rps=round(len(records) / duration, 1),
        p50_ms=pct(ok, 50), p99_ms=pct(ok, 99), p50_all_ms=pct(latency, 50), p99_all_ms=pct(latency, 99),
        max_ms=round(float(latency.max()), 1) if latency.size else 0.0, peak_in_flight=peak,
        lag_p99_ms=pct(np.asarray([r[4] for r in records]) * 1000, 99),
        rss_before_mib=round(rss_before / MIB, 1), rss_peak_mib=round(rss_peak / MIB, 1),
        hwm_mib=round(hwm / MIB, 1), locust_cpu_warning=cpu_warning, load_average=round(load_average, 1),
        server_ms=server,
    )


def stage(api: ServeProcess, work: Path, name: str, *, users: int, rate: float, duration_s: float,
          query_file: Path) -> StageResult:
    before = tree_rss_bytes(api.pid)
    with RssSampler(api.pid) as rss:
        data, log = locust(api, work, name, users=users, rate=rate, duration_s=duration_s, query_file=query_file)
    return summarize(name, data, rss_before=before, rss_peak=rss.peak, hwm=tree_peak_rss_bytes(api.pid),
                     cpu_warning="CPU usage" in log, users=users, mode="open" if rate > 0 else "closed",
                     load_average=os.getloadavg()[0])


# --- the whole run ---------------------------------------------------------------------------------------


def run(plan: LoadPlan, embed_url: str, work: Path, *, rate: float | None = None,
        progress: bool = False) -> LoadResult:
    began = time.monotonic()

    def say(message: str) -> None:
        if progress:
            print(f"[{time.monotonic() - began:6.1f} s] {message}", file=sys.stderr, flush=True)

    query_file = work / "queries.json"
    query_file.write_text(json.dumps(queries()))
    docs = corpus(plan.docs, plan.max_chars)
    # The queries repeat: with the query cache on, repeats would skip the runner's slots this test overloads.
    server_env = {"RAGSERVE_QUERY_CACHE__MAX_BYTES": "0", **plan.server_env}
    with ragserve_serve(work / "data", embed_url, server_env, with_worker=False) as api:
        say(f"ragserve serve pid {api.pid} at {api.url}; indexing {len(docs)} SciFact documents "
            f"(load average {os.getloadavg()[0]:.1f})")
        started = time.monotonic()
        points = fill(api, docs)
        index_s = time.monotonic() - started
        # One untimed search first: the first query pays for lazy imports and caches.
        httpx.post(f"{api.url}/v1/search", headers=api.headers, json={"collection": COLLECTION, "query": "warm up"},
                   timeout=60).raise_for_status()
        idle = tree_rss_bytes(api.pid)
        pids = process_tree(api.pid)
        stages: list[StageResult] = []

        def go(name: str, rps: float, duration_s: float) -> StageResult:
            say(f"{name}: {plan.users} users, " + (f"open loop at {rps:.1f}/s" if rps else "closed loop")
                + f", {duration_s:.0f} s")
            result = stage(api, work, name, users=plan.users, rate=rps, duration_s=duration_s, query_file=query_file)
            say(f"  {result.ok_rps}/s ok, p50 {result.p50_ms} ms, p99 {result.p99_ms} ms, {result.by_status}")
            stages.append(result)
            return result

        if rate is None:
            calibrated = go("calibrate", 0, plan.calibrate_s)
            rate = max(0.1, round(calibrated.ok_rps * plan.sustain_share, 2))
        for attempt in range(plan.attempts):
            held = go("sustained", rate, plan.stage_s)
            if held.p99_ms < plan.p99_target_s * 1000 and held.error_rate == 0:
                break
            if attempt + 1 < plan.attempts:
                rate = max(0.1, round(rate * 0.75, 2))
        overload = rate * plan.overload_factor
        for _ in range(1 + plan.escalations):
            if go("overload", overload, plan.stage_s).by_status.get("429"):
                break
            overload *= 2
    return LoadResult(plan=asdict(plan), docs=len(docs), points=points, index_s=round(index_s, 1),
                      rss_idle_mib=round(idle / MIB, 1), stages=stages, sustained_rps=rate,
                      machine={"cpus": os.cpu_count(), "load_average": os.getloadavg()}, api_pid=api.pid, pids=pids)


def problems(result: LoadResult, plan: LoadPlan) -> list[str]:
    """What the run must not show: an empty list is a pass."""
    found = []
    for s in result.stages:
        if s.server_errors:
            found.append(f"{s.name}: {s.server_errors} 5xx, connection errors or client timeouts {s.by_status}")
        if set(s.by_status) - {"200", "429"}:
            found.append(f"{s.name}: answers other than 200 and 429: {s.by_status}")
        if s.retry_after_429 != s.by_status.get("429", 0):
            found.append(f"{s.name}: {s.by_status.get('429', 0) - s.retry_after_429} 429s without Retry-After")
        if s.rss_peak_mib - result.rss_idle_mib > plan.rss_growth_mib:
            found.append(f"{s.name}: RSS {s.rss_peak_mib} MiB, {s.rss_peak_mib - result.rss_idle_mib:.0f} MiB above "
                         f"idle (bound {plan.rss_growth_mib})")
    held, overload = result.stage("sustained"), result.stage("overload")
    if held.p99_ms >= plan.p99_target_s * 1000 or held.error_rate:
        found.append(f"sustained: not held (p99 {held.p99_ms} ms, {held.by_status})")
    if not overload.by_status.get("429"):
        found.append(f"overload: no 429 at {overload.offered_rps}/s ({overload.by_status}): not an overload")
    if not overload.ok_rps:
        found.append("overload: no request answered 200")
    return found


def table(result: LoadResult) -> str:
    head = ("| stage | users | offered/s | 200/s | p50 ms | p99 ms | p99 all ms | answers by status | "
            "429 with Retry-After | in flight | peak RSS MiB | load avg |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in result.stages:
        offered = f"{s.offered_rps:.1f}" if s.offered_rps else "closed"
        statuses = ", ".join(f"{k}: {v}" for k, v in s.by_status.items())
        lines.append(f"| {s.name} | {s.users} | {offered} | {s.ok_rps} | {s.p50_ms:.0f} | {s.p99_ms:.0f} | "
                     f"{s.p99_all_ms:.0f} | {statuses} | {s.retry_after_429} | {s.peak_in_flight} | "
                     f"{s.rss_peak_mib:.0f} | {s.load_average} |")
    return "\n".join(lines)


@contextmanager
def minilm_runner(url: str | None) -> Iterator[str]:
    """The given runner URL, or a MiniLM runner started for this run."""
    if url:
        yield url
        return
    from service.config import Settings
    from service.profiles import MINILM
    from service.runners.launcher import runner_specs, running
    from tests.support.runners import free_port

    settings = Settings(profile="minilm", runners={"embed_url": f"http://127.0.0.1:{free_port()}"})
    specs = runner_specs(settings, MINILM)
    with tempfile.TemporaryDirectory() as logs, running(specs, log_dir=Path(logs), timeout_s=600):
        yield specs[0].url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="the full form (64 users, 60 s stages, 3,000 docs)")
    parser.add_argument("--rate", type=float, help="the sustained rate, requests/s (default: calibrated)")
    parser.add_argument("--docs", type=int, help="SciFact documents to index (default: the form's)")
    parser.add_argument("--embed-url", default=os.environ.get("RAGSERVE_TEST_MINILM_URL"))
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    parser.add_argument("--keep", type=Path, help="keep the work folder (server log, Locust logs, records) here")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of the server, e.g. RAGSERVE_UPSTREAM__ACQUIRE_TIMEOUT_S=1 (repeatable)")
    args = parser.parse_args()
    plan = FULL if args.full else SHORT
    overrides: dict[str, Any] = {"server_env": {**plan.server_env, **dict(s.split("=", 1) for s in args.set)}}
    if args.docs:
        overrides["docs"] = args.docs
    plan = LoadPlan(**{**asdict(plan), **overrides})
    with ExitStack() as stack:
        work = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ragserve-load-")))
        work.mkdir(parents=True, exist_ok=True)
        url = stack.enter_context(minilm_runner(args.embed_url))
        result = run(plan, url, work, rate=args.rate, progress=True)
    found = problems(result, plan)
    summary = {**asdict(result), "command": " ".join(["python -m tests.load.run", *sys.argv[1:]]), "problems": found,
               "ok": not found}
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{result.docs} SciFact documents ({result.points} points) indexed in {result.index_s} s; "
          f"API RSS idle {result.rss_idle_mib} MiB; sustained rate {result.sustained_rps}/s")
    print(table(result))
    print("\n".join(f"PROBLEM: {p}" for p in found) or "no problem found")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()

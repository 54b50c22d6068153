"""Fuzz the API with Schemathesis over its whole OpenAPI document: a real ``ragserve serve`` process on a
loopback port (minilm profile, the embedded Qdrant Edge store in a temporary folder, its in-process
indexing worker, a server-path ingest root with a few files), every phase (examples, coverage,
fuzzing, stateful), and the checks for server errors, response-schema conformance and status-code
conformance. Passing means: no failures, no errors, no warnings about the schema (unresolvable
references, operations that reject most data their schema allows, regexes Schemathesis cannot use),
and a document that ``openapi-spec-validator`` accepts.

    python -m tests.fuzz.run --max-examples 100 --out docs/fuzzing.json   # the full form (docs/fuzzing.md)
    python -m tests.fuzz.run --max-examples 5                              # what CI runs (tests/fuzz)

The embedding runner is ``--embed-url`` (default ``$RAGSERVE_TEST_MINILM_URL``, or one started here).
The deployment's limits are set low (``FUZZ_ENV``) so that generated requests stay small; the document
carries them, so the fuzzer generates within them, and that is part of what is tested.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.process import ragserve_serve

CHECKS = ("not_a_server_error", "status_code_conformance", "response_schema_conformance")
PHASES = ("examples", "coverage", "fuzzing", "stateful")
SCHEMA_WARNINGS = ("unresolvable_reference", "validation_mismatch", "unsupported_regex", "missing_deserializer",
                   "unused_openapi_auth", "method_not_allowed")
"""Warnings that say the document is wrong; the others (e.g. missing_test_data: a random collection name
is rarely one that exists) say what a fuzzer could not reach."""
FUZZ_ENV = {
    "RAGSERVE_LIMITS__MAX_DOCUMENTS_PER_REQUEST": "8",
    "RAGSERVE_LIMITS__MAX_DOCUMENT_BYTES": "4096",
    "RAGSERVE_LIMITS__MAX_QUERY_CHARS": "512",
    "RAGSERVE_LIMITS__MAX_TOP_K": "50",
    "RAGSERVE_LIMITS__MAX_RERANK_CANDIDATES": "50",
    "RAGSERVE_LIMITS__MAX_COLLECTIONS": "64",
    "RAGSERVE_LIMITS__MAX_UPLOAD_FILES": "8",
    "RAGSERVE_INGEST__MAX_FILE_BYTES": "65536",
    "RAGSERVE_UPSTREAM__EMBED_TIMEOUT_S": "120",
    "RAGSERVE_UPSTREAM__ACQUIRE_TIMEOUT_S": "60",
}
CORPUS = {"guide.md": "# Guide\n\nHold the reset button for ten seconds.\n", "notes/faq.txt": "Vectors live in Qdrant.\n"}


@dataclass
class FuzzResult:
    command: list[str]
    seed: int | None
    cases: int
    operations: int
    phases: dict[str, str]
    failures: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    warnings: dict[str, list[str]]
    schema_valid: bool
    running_time_s: float
    schemathesis: str
    exit_code: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


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


def fuzz(embed_url: str, work: Path, *, max_examples: int, seed: int | None = None, workers: int = 1,
         timeout_s: float = 3600) -> FuzzResult:
    corpus = work / "corpus"
    for name, text in CORPUS.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_text(text)
    env = {**FUZZ_ENV, "RAGSERVE_INGEST__ALLOWED_ROOTS": str(corpus)}
    report = work / "schemathesis.json"
    with ragserve_serve(work / "data", embed_url, env) as api:
        document = httpx.get(f"{api.url}/openapi.json", timeout=30).json()
        schema_valid, problems = _validate(document)
        command = [
            sys.executable, "-m", "schemathesis.cli", "run", f"{api.url}/openapi.json",
            "-H", f"Authorization: Bearer {api.key}", "--checks", ",".join(CHECKS), "--phases", ",".join(PHASES),
            "--max-examples", str(max_examples), "--workers", str(workers), "--request-timeout", "180",
            "--report", "json", "--report-json-path", str(report), "--no-color",
        ]
        if seed is not None:
            command += ["--seed", str(seed)]
        started = time.monotonic()
        run = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=work)
        (work / "schemathesis.out").write_text(run.stdout + run.stderr)
        elapsed = time.monotonic() - started
    data = json.loads(report.read_text())
    warnings = {k: v for k, v in data.get("warnings", {}).items() if v}
    problems += [f"{f['code']} {f['title']}: {f['count']} in {', '.join(f['operations'])}" for f in data["failures"]]
    problems += [f"error: {e['title']} ({e['count']})" for e in data["errors"]]
    problems += [f"schema warning {k}: {', '.join(v)}" for k, v in warnings.items() if k in SCHEMA_WARNINGS]
    if data["operations"]["tested"] != data["operations"]["total"]:
        problems.append(f"only {data['operations']['tested']} of {data['operations']['total']} operations tested")
    skipped = [p for p, s in data["phases"].items() if s["status"] == "skip"]
    if skipped:
        problems.append(f"phases skipped: {', '.join(skipped)}")
    return FuzzResult(
        command=["python", "-m", "schemathesis.cli", *command[3:4], "<url>/openapi.json", *command[5:6],
                 "Authorization: Bearer <key>", *command[7:]],
        seed=data.get("seed"), cases=int(data["test_cases"]["generated"]), operations=int(data["operations"]["tested"]),
        phases={p: s["status"] for p, s in data["phases"].items()}, failures=data["failures"],
        errors=data["errors"], warnings=warnings, schema_valid=schema_valid, running_time_s=round(elapsed, 1),
        schemathesis=str(data["schemathesis_version"]), exit_code=run.returncode, problems=problems,
    )


def _validate(document: dict[str, Any]) -> tuple[bool, list[str]]:
    from openapi_spec_validator import validate

    try:
        validate(document)
    except Exception as exc:  # noqa: BLE001 - any validator complaint is the finding
        return False, [f"the OpenAPI document is invalid: {str(exc).splitlines()[0]}"]
    return True, []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=100, help="cases per operation and phase")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--embed-url", default=os.environ.get("RAGSERVE_TEST_MINILM_URL"))
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    parser.add_argument("--keep", type=Path, help="keep the work folder (server log, Schemathesis output) here")
    args = parser.parse_args()
    with ExitStack() as stack:
        work = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ragserve-fuzz-")))
        work.mkdir(parents=True, exist_ok=True)
        url = stack.enter_context(minilm_runner(args.embed_url))
        result = fuzz(url, work, max_examples=args.max_examples, seed=args.seed, workers=args.workers)
    summary = {**asdict(result), "ok": result.ok}
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k] for k in ("cases", "operations", "phases", "failures", "errors", "warnings",
                                              "schema_valid", "running_time_s", "seed", "problems", "ok")}, indent=2))
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()

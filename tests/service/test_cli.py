"""The ``ragserve`` command as a user runs it: real subprocesses, real HTTP."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from service.runners.cores import allowed_cpus
from tests.support.runners import RunnerURLs, counted_start, free_port
from tests.support.tiers import patient


def _wait_for_line(proc: subprocess.Popen[str], pattern: str, timeout_s: float) -> tuple[re.Match[str], str]:
    seen = []
    deadline = time.monotonic() + patient(timeout_s)  # a liveness bound only: another process's output
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if m := re.search(pattern, line):
            return m, "".join(seen)
    raise AssertionError(f"{pattern!r} not printed; output:\n{''.join(seen)}")


def test_serve_generates_and_prints_a_key(runners: RunnerURLs, tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "RAGSERVE_PROFILE": "minilm", "RAGSERVE_RUNNERS__EMBED_URL": runners.minilm_embed,
           "RAGSERVE_DATA_DIR": str(tmp_path), "RAGSERVE_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    env.pop("RAGSERVE_API_KEYS", None)
    with subprocess.Popen([sys.executable, "-m", "service.cli", "serve"], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        _serve_checks(proc, port)


def _serve_checks(proc: subprocess.Popen[str], port: int) -> None:
    try:
        m, _ = _wait_for_line(proc, r"Generated API key \(development only\): (\S+)", 60)
        key = m.group(1)
        _wait_for_line(proc, r"Uvicorn running", 60)
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/health").status_code == 200
        assert httpx.get(f"{base}/v1/collections").status_code == 401
        ok = httpx.get(f"{base}/ready", headers={"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200, ok.text
    finally:
        proc.terminate()
        proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()  # else the pipe is closed by GC, a ResourceWarning (an error here)


@pytest.mark.timeout(900)
def test_demo_main_job(tmp_path: Path) -> None:
    """The README's main job: runners + API + sample collection + a query, on a fresh data dir. It starts a
    MiniLM runner of its own, since starting the runners is part of what the command does (counted among the
    session's vLLM starts)."""
    counted_start(1)
    port = free_port()
    env = {**os.environ, "RAGSERVE_DATA_DIR": str(tmp_path), "RAGSERVE_PORT": str(port),
           "RAGSERVE_RUNNERS__EMBED_URL": f"http://127.0.0.1:{free_port()}", "PYTHONUNBUFFERED": "1"}
    env.pop("RAGSERVE_API_KEYS", None)
    proc = subprocess.run([sys.executable, "-m", "service.cli", "demo", "--no-wait"], env=env, text=True,
                          capture_output=True, timeout=patient(840))  # a liveness bound: a vLLM start and a job
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "indexed 16 documents into 'sample'" in out
    assert re.search(r"1\. \[[0-9.]+\] photosynthesis:", out), out
    key = re.search(r"API key: (rs-\S+)", out)
    assert key, out
    assert f"playground: http://127.0.0.1:{port}/ui  (paste the key" in out
    assert f"RAGSERVE_API_KEY={key[1]} .venv/bin/ragserve index ./my-docs --collection kb" in out
    # The launcher's core plan (RAGSERVE_RUNNERS__CPU_PLAN=auto): a runner alone computes on every core this
    # process may use, where vLLM's own placement keeps one in reserve; vLLM's log says where it bound.
    log = (tmp_path / "logs" / "embedding.log").read_text()
    assert f"local_rank=0, core ids={allowed_cpus()}" in log, [line for line in log.splitlines() if "core ids" in line]


def test_runners_up_print_only_is_copy_pasteable_and_refuses_bad_combinations(tmp_path: Path) -> None:
    env = {**os.environ, "RAGSERVE_PROFILE": "qwen3", "RAGSERVE_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "service.cli", "runners", "up", "--print-only"], env=env,
                         text=True, capture_output=True, timeout=240)  # includes vLLM's parser check (~20 s)
    assert out.returncode == 0, out.stderr
    generator = shlex.split(out.stdout.splitlines()[-1])
    assert generator[:3] == ["env", "VLLM_MEDIA_URL_ALLOW_REDIRECTS=0", "VLLM_ALLOW_RUNTIME_LORA_UPDATING=0"]
    assert "Qwen/Qwen3-VL-2B-Instruct" in generator
    limits = generator[generator.index("--limit-mm-per-prompt") + 1]
    assert json.loads(limits)["image"] == {"count": 1, "width": 896, "height": 896}
    env["RAGSERVE_GENERATION__LORA_ADAPTERS"] = '{"tenant-a": "/adapters/a"}'
    env["RAGSERVE_GENERATION__SPECULATIVE_CONFIG"] = '{"method": "ngram", "num_speculative_tokens": 2}'
    bad = subprocess.run([sys.executable, "-m", "service.cli", "runners", "up"], env=env, text=True,
                         capture_output=True, timeout=60)
    assert bad.returncode == 2
    assert "LoRA adapters and speculative decoding cannot be combined" in bad.stderr
    assert "Traceback" not in bad.stderr


def _keys_hash(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSERVE_")}
    return subprocess.run([sys.executable, "-m", "service.cli", "keys", "hash", *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


async def test_keys_hash_prints_an_entry_the_keyring_accepts_and_the_key_once() -> None:
    import hashlib

    from service.auth.keyring import KeyRing
    from service.config.keys import ApiKeyEntry
    from service.store.tenancy import Tenant

    done = _keys_hash("--scope", "read", "--scope", "write", "--collection", "kb", "--tenant", "org=acme",
                      "--id", "acme-app")
    assert done.returncode == 0, done.stderr
    key = done.stderr.strip().rsplit(": ", 1)[1]
    entry = json.loads(done.stdout)
    assert entry == {"id": "acme-app", "sha256": hashlib.sha256(key.encode()).hexdigest(), "scopes": ["read", "write"],
                     "collections": ["kb"], "tenant": {"field": "org", "value": "acme"}}
    assert key not in done.stdout  # the entry holds the hash only
    principal = await KeyRing.build([], [ApiKeyEntry.model_validate(entry)]).authenticate(key)
    assert principal is not None and principal.tenant == Tenant("org", "acme")

    person = _keys_hash("--scheme", "scrypt", "--stdin", stdin="a passphrase somebody chose\n")
    assert person.returncode == 0 and person.stderr == ""
    scrypt_entry = ApiKeyEntry.model_validate_json(person.stdout)
    assert scrypt_entry.scopes == ["read"] and scrypt_entry.scrypt is not None
    assert await KeyRing.build([], [scrypt_entry]).authenticate("a passphrase somebody chose") is not None

    refused = _keys_hash("--scope", "admin", "--tenant", "org=acme")
    assert refused.returncode == 1 and "cannot hold 'admin'" in refused.stderr and refused.stdout == ""


def test_a_refused_setting_is_named_and_its_value_never_printed(tmp_path: Path) -> None:
    """A key that fails validation (too short) must not reach the terminal: it may be a real secret."""
    secret = "hunter2-secret"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSERVE_")}
    env.update(RAGSERVE_API_KEYS=secret, RAGSERVE_DATA_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "service.cli", "serve"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("ragserve: invalid settings: api_keys: "), done.stderr
    assert secret not in done.stdout + done.stderr

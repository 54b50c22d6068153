"""deploy/local's install scripts as a newcomer sees them (the README's first command runs them): one line per
step on the terminal, apt-get's own output in a log file, and its last lines when a step fails. A stand-in
``apt-get`` (and ``id``, so the root path runs) on PATH records the calls and prints what apt-get prints."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOISE = 300
APT = f"""#!/bin/sh
echo "$*" >> "$APT_CALLS"
i=0
while [ $i -lt {NOISE} ]; do echo "Get:$i http://deb.debian.org/debian bookworm/main amd64 noise [$*]"; i=$((i+1)); done
case "$1" in "$APT_FAIL") echo "E: Unable to locate package" >&2; exit 100;; esac
exit 0
"""


def run_ocr_install(tmp_path: Path, fail: str = "") -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("apt-get", APT), ("id", "#!/bin/sh\necho 0\n")):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    log, calls = tmp_path / "setup.log", tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RAGSERVE_OCR__LANGUAGES": "zzz",
           "RAGSERVE_SETUP_LOG": str(log), "APT_CALLS": str(calls), "APT_FAIL": fail or "-"}
    done = subprocess.run(["bash", str(ROOT / "deploy" / "local" / "install-ocr.sh")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    return done, log, calls


def test_the_ocr_install_prints_a_line_per_step_and_logs_apt_get(tmp_path: Path) -> None:
    done, log, calls = run_ocr_install(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"ragserve setup: installing Tesseract OCR (tesseract-ocr tesseract-ocr-zzz), full log in {log}",
        "ragserve setup: apt-get update ... ok",
        "ragserve setup: apt-get install ... ok",
    ]
    assert done.stderr == ""
    install = "install -y -q --no-install-recommends tesseract-ocr tesseract-ocr-zzz"
    assert calls.read_text().splitlines() == ["update -q", install]
    lines = log.read_text().splitlines()
    assert lines[0] == "Get:0 http://deb.debian.org/debian bookworm/main amd64 noise [update -q]"
    assert len(lines) == 2 * NOISE and lines[-1].endswith(f"noise [{install}]")


def test_a_failed_step_shows_the_end_of_the_log_and_fails_the_script(tmp_path: Path) -> None:
    done, log, calls = run_ocr_install(tmp_path, fail="install")
    assert done.returncode == 100
    assert done.stdout.splitlines()[-1] == (
        f"ragserve setup: apt-get install ... failed (exit 100): the end of {log} follows")
    assert done.stderr.splitlines() == log.read_text().splitlines()[-20:]
    assert done.stderr.splitlines()[-1] == "E: Unable to locate package"

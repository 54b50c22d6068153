"""The soak tier's figures against their committed baselines.

Each soak test records what it measured through the ``soak_figures`` fixture (``soak_figures("lanes.search_p95_ms",
412, "ms", "lower", tolerance=0.5)``), before its own assertions, so a failing test still reports. At the end of a
``bash tests/run.sh --soak`` run every figure is printed beside its baseline (``docs/soak/baseline.json``) and its
band, with the verdict:

- ``ok``: inside the band;
- ``regressed``: worse than the band allows (the run then exits 1, like a failed test);
- ``improved``: better than the band on the other side (time to move the baseline);
- ``new``: no baseline yet;
- ``not run``: a baselined figure that no test recorded this run (deselected, or its test failed first).

The band is relative, with an absolute slack for figures near zero: for a figure where lower is better, a value
above ``baseline * (1 + tolerance) + slack`` regressed; where higher is better, one below
``baseline * (1 - tolerance) - slack``. The test that records a figure says its tolerance, because it knows how
much the machine moves it: stall bounds and latencies on 2 shared cores move by half, a retrieval metric by 0.005.

Every run is written with its commit to ``docs/soak/runs/<commit>-<time>.json``; ``--soak-baseline`` also writes
this run's figures as the new baseline (commit both).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "docs" / "soak" / "baseline.json"
RUNS = ROOT / "docs" / "soak" / "runs"
BASELINE_OPTION = "--soak-baseline"

Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    better: Better
    tolerance: float
    """Relative: how far past its baseline, on the worse side, a value may fall before it regressed."""
    slack: float
    """Absolute, added to the band: for figures near zero, where a relative band is no band at all."""
    test: str


@dataclass(frozen=True)
class Baseline:
    value: float
    unit: str
    better: Better
    tolerance: float
    slack: float
    commit: str


@dataclass(frozen=True)
class Row:
    name: str
    value: float | None
    unit: str
    baseline: float | None
    band: tuple[float, float] | None
    """The values counted ``ok``: from the limit on the better side to the limit on the worse side."""
    verdict: str
    test: str


def band(base: Baseline) -> tuple[float, float]:
    """(low, high): outside it a value regressed on the worse side and improved on the better one."""
    low = base.value * (1 - base.tolerance) - base.slack
    high = base.value * (1 + base.tolerance) + base.slack
    return low, high


def verdict(value: float, base: Baseline | None) -> str:
    if base is None:
        return "new"
    low, high = band(base)
    worse, better = (value > high, value < low) if base.better == "lower" else (value < low, value > high)
    return "regressed" if worse else "improved" if better else "ok"


class Figures:
    """What the soak tests recorded in this session, in order."""

    def __init__(self) -> None:
        self.recorded: list[Figure] = []

    def record(self, name: str, value: float, unit: str, better: Better, *, tolerance: float, slack: float = 0.0,
               test: str = "") -> None:
        if any(f.name == name for f in self.recorded):
            raise ValueError(f"figure {name} recorded twice")
        if better not in ("lower", "higher") or tolerance < 0 or slack < 0:
            raise ValueError(f"figure {name}: better={better!r}, tolerance={tolerance}, slack={slack}")
        self.recorded.append(Figure(name, float(value), unit, better, tolerance, slack, test))


def load_baselines(path: Path = BASELINE) -> dict[str, Baseline]:
    if not path.exists():
        return {}
    return {name: Baseline(**entry) for name, entry in json.loads(path.read_text())["figures"].items()}


def compare(figures: Iterable[Figure], baselines: Mapping[str, Baseline]) -> list[Row]:
    """Every recorded figure against its baseline, then the baselined figures nobody recorded."""
    rows: list[Row] = []
    seen = set()
    for f in figures:
        seen.add(f.name)
        base = baselines.get(f.name)
        rows.append(Row(f.name, f.value, f.unit, base.value if base else None, band(base) if base else None,
                        verdict(f.value, base), f.test))
    for name, base in baselines.items():
        if name not in seen:
            rows.append(Row(name, None, base.unit, base.value, band(base), "not run", ""))
    return rows


def _number(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def table(rows: Iterable[Row]) -> str:
    lines = [f"{'figure':<38} {'value':>10} {'baseline':>10} {'band':>21}  {'unit':<10} verdict"]
    for r in rows:
        span = "-" if r.band is None else f"{_number(r.band[0])} .. {_number(r.band[1])}"
        mark = "REGRESSED" if r.verdict == "regressed" else r.verdict
        lines.append(f"{r.name:<38} {_number(r.value):>10} {_number(r.baseline):>10} {span:>21}  {r.unit:<10} {mark}")
    return "\n".join(lines)


def commit() -> tuple[str, bool]:
    """HEAD's id and whether the working tree differs from it (``unknown`` outside a git checkout)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip() != ""
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True
    return head, dirty


def write_run(rows: list[Row], figures: list[Figure], outcomes: Mapping[str, int], started: float,
              runs: Path = RUNS) -> Path:
    """The run, with its commit, the machine's load and every row: ``runs/<commit>-<UTC time>.json``."""
    head, dirty = commit()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / f"{head[:12]}-{stamp}.json"
    by_name = {f.name: f for f in figures}
    record: dict[str, Any] = {
        "commit": head, "dirty": dirty, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "wall_s": round(time.time() - started, 1), "cpus": os.cpu_count(), "load_average_end": os.getloadavg(),
        "outcomes": dict(outcomes),
        "figures": [{**asdict(r), **({"better": by_name[r.name].better, "tolerance": by_name[r.name].tolerance,
                                      "slack": by_name[r.name].slack} if r.name in by_name else {})} for r in rows],
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def write_baseline(figures: Iterable[Figure], path: Path = BASELINE) -> None:
    """This run's figures as the baseline; figures this run did not record keep their old entries."""
    head, dirty = commit()
    entries = {name: asdict(b) for name, b in load_baselines(path).items()}
    for f in figures:
        entries[f.name] = asdict(Baseline(f.value, f.unit, f.better, f.tolerance, f.slack,
                                          head + ("+dirty" if dirty else "")))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"about": "tests/support/soak.py", "figures": dict(sorted(entries.items()))},
                               indent=1) + "\n")

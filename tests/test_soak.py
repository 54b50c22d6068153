"""The soak tier's comparison against baselines (tests/support/soak.py): verdicts at the edges of each band, the
rows a run prints, and the files it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.soak import (
    Baseline,
    Figures,
    band,
    compare,
    load_baselines,
    table,
    verdict,
    write_baseline,
    write_run,
)

LATENCY = Baseline(value=100.0, unit="ms", better="lower", tolerance=0.5, slack=10.0, commit="c0")
RPS = Baseline(value=20.0, unit="req/s", better="higher", tolerance=0.25, slack=0.0, commit="c0")


def test_band_is_relative_plus_slack() -> None:
    assert band(LATENCY) == (40.0, 160.0)
    assert band(RPS) == (15.0, 25.0)


@pytest.mark.parametrize(("value", "expected"), [(160.0, "ok"), (160.5, "regressed"), (40.0, "ok"),
                                                 (39.5, "improved"), (100.0, "ok")])
def test_lower_is_better(value: float, expected: str) -> None:
    assert verdict(value, LATENCY) == expected


@pytest.mark.parametrize(("value", "expected"), [(15.0, "ok"), (14.9, "regressed"), (25.1, "improved")])
def test_higher_is_better(value: float, expected: str) -> None:
    assert verdict(value, RPS) == expected


def test_rows_cover_new_recorded_and_baselined_but_not_run() -> None:
    figures = Figures()
    figures.record("api.p50_ms", 170.0, "ms", "lower", tolerance=0.5, slack=10.0, test="t::a")
    figures.record("api.fresh", 1.0, "x", "higher", tolerance=0.1, test="t::b")
    rows = compare(figures.recorded, {"api.p50_ms": LATENCY, "api.rps": RPS})
    assert [(r.name, r.value, r.baseline, r.verdict, r.test) for r in rows] == [
        ("api.p50_ms", 170.0, 100.0, "regressed", "t::a"),
        ("api.fresh", 1.0, None, "new", "t::b"),
        ("api.rps", None, 20.0, "not run", ""),
    ]
    printed = table(rows).splitlines()
    assert printed[1].split() == ["api.p50_ms", "170", "100", "40", "..", "160", "ms", "REGRESSED"]
    assert printed[2].split() == ["api.fresh", "1", "-", "-", "x", "new"]


def test_a_figure_is_recorded_once_with_a_valid_band() -> None:
    figures = Figures()
    figures.record("a", 1.0, "s", "lower", tolerance=0.5)
    with pytest.raises(ValueError, match="twice"):
        figures.record("a", 2.0, "s", "lower", tolerance=0.5)
    with pytest.raises(ValueError, match="better"):
        figures.record("b", 2.0, "s", "faster", tolerance=0.5)  # type: ignore[arg-type]


def test_a_run_is_written_with_its_commit_and_becomes_the_baseline(tmp_path: Path) -> None:
    figures = Figures()
    figures.record("api.p50_ms", 90.0, "ms", "lower", tolerance=0.5, slack=10.0, test="t::a")
    baseline = tmp_path / "baseline.json"
    figure = figures.recorded[0]
    write_baseline([figure], baseline)
    written = load_baselines(baseline)["api.p50_ms"]
    assert (written.value, written.unit, written.better, written.tolerance, written.slack) == (90.0, "ms", "lower",
                                                                                               0.5, 10.0)
    assert len(written.commit.removesuffix("+dirty")) == 40

    rows = compare([figure], load_baselines(baseline))
    path = write_run(rows, [figure], {"passed": 1}, started=0.0, runs=tmp_path / "runs")
    run = json.loads(path.read_text())
    assert path.name.startswith(run["commit"][:12] + "-")
    assert run["outcomes"] == {"passed": 1}
    assert run["figures"] == [{"name": "api.p50_ms", "value": 90.0, "unit": "ms", "baseline": 90.0,
                               "band": [35.0, 145.0], "verdict": "ok", "test": "t::a", "better": "lower",
                               "tolerance": 0.5, "slack": 10.0}]

"""The short form of the fuzz run (tests/fuzz/run.py; the full form and its last results: docs/fuzzing.md):
Schemathesis over the whole OpenAPI document of a real ``ragserve serve`` process, every phase, stateful
included, a few cases per operation. Zero failures, zero errors, no warning about the schema, a valid
document."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.run import PHASES, fuzz
from tests.support.runners import RunnerURLs

pytestmark = pytest.mark.timeout(900)  # past the run's own bound (timeout_s), so that one reports first


def test_schemathesis_finds_nothing(runners: RunnerURLs, tmp_path: Path) -> None:
    result = fuzz(runners.minilm_embed, tmp_path, max_examples=5, seed=20261201, timeout_s=900)
    assert result.problems == [], (tmp_path / "schemathesis.out").read_text()[-5000:]
    assert result.schema_valid
    assert result.phases == dict.fromkeys(PHASES, "success")
    assert result.operations >= 15 and result.cases > 500

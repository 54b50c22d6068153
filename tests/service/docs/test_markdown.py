"""Tables, anchors and the --check mode of the generators."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.docs.markdown import cell, check_or_write, code, slug


def test_cells_stay_on_one_line_and_escape_pipes() -> None:
    assert cell("a |\n b") == "a \\| b"
    assert code("x`y") == "``x`y``"


@pytest.mark.parametrize(("heading", "anchor"), [
    ("POST /v1/collections/{name}/documents", "post-v1collectionsnamedocuments"),
    ("DELETE /v1/jobs/{job_id}", "delete-v1jobsjob_id"),
    ("SearchRequest", "searchrequest"),
    ("top level", "top-level"),
])
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_check_fails_with_the_command_to_run_and_writing_makes_it_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "ref.md"
    target.write_text("old\n")
    assert check_or_write(target, lambda: "new\n", "python -m x", ["--check"]) == 1
    assert "ref.md is stale: run `python -m x` and commit the result" in capsys.readouterr().err
    assert check_or_write(target, lambda: "new\n", "python -m x", []) == 0
    assert target.read_text() == "new\n"
    assert check_or_write(target, lambda: "new\n", "python -m x", ["--check"]) == 0

"""docs/configuration.md: fresh, and every variable Settings reads is in it, described."""

from __future__ import annotations

from pydantic import BaseModel

from service.config import Settings, setting_names
from service.docs import configuration
from tests.service.docs.stale import assert_fresh


def test_docs_configuration_md_is_fresh() -> None:
    assert_fresh(configuration.OUTPUT, configuration.render(), configuration.COMMAND)


def test_every_variable_is_listed_with_a_description() -> None:
    rendered = configuration.render()
    leaves = {v.name for v in configuration.variables(Settings, "RAGSERVE_")}
    sections = {n for n in setting_names() if n not in leaves}
    assert leaves and all(n.count("__") <= 2 for n in leaves)
    assert sections == {f"RAGSERVE_{s.upper()}" for s, model in configuration.sections() if model is not None} | {
        f"RAGSERVE_ENGINE__{runner}" for runner in ("EMBED", "RERANK", "GENERATE")}
    undescribed = sorted(v.name for v in configuration.variables(Settings, "RAGSERVE_") if not v.field.description)
    assert not undescribed, f"give these settings a Field(description=...) in service/config/: {undescribed}"
    for name in leaves:
        assert f"| `{name}` |" in rendered, name


def test_types_and_defaults_read_as_written_in_the_environment() -> None:
    rendered = configuration.render()
    assert "| `RAGSERVE_PROFILE` | one of `qwen3`, `qwen3-large`, `minilm` | `qwen3` |" in rendered
    assert "| `RAGSERVE_QDRANT__URL` | string, optional | unset |" in rendered
    assert "| `RAGSERVE_MEDIA__MAX_IMAGES_PER_REQUEST` | integer | `1` | ≥ 1, ≤ 8 |" in rendered
    assert "| `RAGSERVE_GENERATION__ENABLED` | boolean | `true` |" in rendered
    assert issubclass(Settings.model_fields["limits"].annotation, BaseModel)  # type: ignore[arg-type]

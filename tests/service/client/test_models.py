"""The client's response models hold exactly the fields the server's OpenAPI document gives its responses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic import BaseModel

from indexer.queue import Counts
from service.api.app import create_app
from service.client import models
from service.config import Settings
from service.generation.chat import PreparedChat
from service.generation.citations import Citation
from tests.support.app import API_KEY


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:  # type: ignore[type-arg]
    settings = Settings(profile="minilm", api_keys=[API_KEY], data_dir=Path(tmp_path_factory.mktemp("openapi")))
    return create_app(settings).openapi()["components"]["schemas"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("model", "schema"), [
    (models.Collection, "CollectionOut"), (models.UpsertResult, "UpsertResult"),
    (models.DeleteResult, "DeleteByFilterResult"), (models.Job, "JobOut"), (models.JobProgress, "JobProgress"),
    (models.SearchHit, "SearchHit"), (models.SearchResult, "SearchResponse"), (models.ImageInfo, "ImageInfo"),
    (models.Snapshot, "SnapshotOut"), (models.SnapshotCollection, "SnapshotCollection"),
    (models.SnapshotListing, "SnapshotList"), (models.UnreadableSnapshot, "UnreadableSnapshot"),
    (models.ContextResult, "ContextResponse"), (models.ContextPassage, "ContextPassage"),
    (models.DroppedCandidate, "DroppedCandidate"), (models.ImportResult, "ImportOut"),
    (models.FeedbackResult, "FeedbackResponse"),
])
def test_model_fields_are_the_response_schema(schemas: dict, model: type[BaseModel], schema: str) -> None:  # type: ignore[type-arg]
    assert set(model.model_fields) == set(schemas[schema]["properties"])


def test_job_counts_and_citations_are_the_servers() -> None:
    assert set(models.JobCounts.model_fields) == {f.name for f in dataclasses.fields(Counts)}
    wire = Citation(1, "kb", "d", 0, "id", 0.5, "t", offsets={"char_start": 0}, page=1, headings=["h"]).to_dict()
    assert set(models.Citation.model_fields) == set(wire)


def test_chat_results_read_every_field_of_the_chat_extension() -> None:
    extension = PreparedChat({}, "m", citations=[]).extension()
    assert set(extension) == {"search_id", "citations", "retrieval"}
    assert set(extension) <= set(models.ChatResult.model_fields)

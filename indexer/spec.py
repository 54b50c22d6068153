"""What an ingest job is asked to do: the wire model, stored as JSON in the job queue."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from service.client.paths import name_prefix_problem
from service.documents.payload import ID_PATTERN, check_metadata
from service.json_types import JsonInt
from service.store.tenancy import Tenant

STRICT = ConfigDict(extra="forbid", strict=True)
"""As the API's request models: "5" is not an integer, "true" not a boolean."""


class PathSource(BaseModel):
    model_config = STRICT

    kind: Literal["path"] = "path"
    path: str = Field(description="A file or folder on the server, under one of RAGSERVE_INGEST__ALLOWED_ROOTS.")
    include: list[str] = Field(default_factory=lambda: ["**/*"], description="Glob patterns of files to take.")
    exclude: list[str] = Field(default_factory=list, description="Glob patterns of files to skip.")
    recursive: bool = True
    name_prefix: str = Field(
        "", max_length=512,
        description="Put before every file's relative path to make its document id (several roots side by side).",
    )

    @field_validator("name_prefix")
    @classmethod
    def _relative(cls, value: str) -> str:
        problem = name_prefix_problem(value)  # the client checks a prefix by the same rule before uploading
        if problem:
            raise ValueError(problem)
        return value


class UrlSource(BaseModel):
    model_config = STRICT

    kind: Literal["url"] = "url"
    urls: list[str] = Field(min_length=1, max_length=1000, description="http(s) URLs on allowlisted domains.")


class UploadSource(BaseModel):
    """Files uploaded with the request, stored with the job in its queue (``JobQueue.read_upload``) until
    the job ends."""

    model_config = STRICT

    kind: Literal["upload"] = "upload"
    files: list[str]
    dir: str | None = Field(None, description="Unused: where jobs queued by earlier versions kept their files.")


Source = Annotated[PathSource | UrlSource | UploadSource, Field(discriminator="kind")]


class IngestOptions(BaseModel):
    model_config = STRICT

    source_name: str | None = Field(
        None, max_length=1024,
        description="Identity of the source for re-syncs (default: the path, the URL list, or 'upload').",
    )
    prune: bool = Field(False, description="Delete documents of this source that are no longer in it.")
    chunking: Literal["auto", "tokens", "none"] = Field(
        "auto",
        description="auto: files are chunked, JSONL records are passages; tokens: chunk all; none: one chunk each.",
    )
    chunk_tokens: JsonInt | None = Field(None, ge=8, description="Tokens per chunk (capped at the model's window).")
    chunk_overlap: JsonInt | None = Field(None, ge=0)
    metadata: Annotated[dict[Annotated[str, Field(min_length=1, max_length=256, pattern=ID_PATTERN)], Any],
                        AfterValidator(check_metadata)] = Field(
        default_factory=dict, description="Added to every document's metadata (the same rules as a document's)."
    )


class IngestSpec(IngestOptions):
    source: Source
    tenant: Tenant | None = Field(None, description="The submitting key's tenant: stamped on every document, "
                                  "and the only documents this job's re-sync and prune see.")
    submitted_by: str | None = Field(None, description="The submitting key's id (write keys see their own jobs).")


def default_source_name(source: PathSource | UrlSource | UploadSource) -> str:
    if isinstance(source, PathSource):
        return f"path:{source.path}"
    if isinstance(source, UrlSource):
        return "urls:" + ",".join(sorted(source.urls))[:900]
    return "upload"

"""Cohere's rerank API, v1 (``/v1/rerank``) and v2 (``/v2/rerank``), as ragserve serves it.

Every field Cohere documents is either taken, with Cohere's default, or refused with a 422 that names it:

- ``model``: optional here (ragserve serves its profile's reranker whatever is named);
- ``top_n``: the best ``top_n`` results; all of them when absent or larger than the documents;
- v1 ``documents``: strings, or objects ranked on their ``rank_fields`` (default ``["text"]``); one field is
  ranked as its value alone, several as ``field: value`` lines in ``rank_fields``' order (Cohere's YAML form);
- v1 ``return_documents`` (default false): each result carries its document as sent (a string as ``{"text"}``);
- v1 ``max_chunks_per_doc``: ragserve scores one chunk per document, its head cut to the reranker's window, so
  only ``1`` is taken (Cohere's own default, 10, would be a promise ragserve does not keep);
- v2 ``documents``: strings only (Cohere v2); v2 ``max_tokens_per_doc`` (default 4096): each document is cut to
  that many tokens, or to the reranker's window when that is shorter;
- v2 ``priority`` (default 0): taken; every rerank is served in the runner's query lane, in arrival order;
- v2 ``relevant_spans``: ``{"mode": "disabled"}`` is taken; ``"enabled"`` (Rerank v5's spans) is refused.

``instruction`` is ragserve's extension on both: the Qwen3 reranker's instruction.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from service.api.schemas.common import NonEmptyText, RequestModel, Text, refuse
from service.errors import InvalidInput
from service.json_types import JsonInt

InputText = NonEmptyText
FieldName = Annotated[str, Field(min_length=1, max_length=256)]
DEFAULT_MAX_TOKENS_PER_DOC = 4096
"""Cohere v2's default ``max_tokens_per_doc``."""

_MODEL = Field(None, description="Ignored: ragserve serves its profile's reranker (see /v1/models).")
_TOP_N = Field(None, ge=1, description="Return the best top_n results (default: all of them).")
_INSTRUCTION = Field(None, max_length=1000, description="ragserve's extension: the Qwen3 reranker's instruction "
                     "(default: RAGSERVE_RERANK_INSTRUCTION, else the model card's).")
_DOCUMENTS = "At most RAGSERVE_LIMITS__MAX_RERANK_CANDIDATES."


class RerankRequest(RequestModel):
    """Cohere v1 ``POST /v1/rerank``."""

    query: InputText
    documents: list[InputText | dict[FieldName, Text]] = Field(
        min_length=1, description="Strings, or objects of strings ranked on their rank_fields (every field is "
        "returned with return_documents). " + _DOCUMENTS)
    model: str | None = _MODEL
    top_n: JsonInt | None = _TOP_N
    rank_fields: list[FieldName] | None = Field(
        None, min_length=1, description='The fields of object documents to rank on, in order (default ["text"]); '
        "each must hold non-empty text in every document.")
    return_documents: bool = Field(False, description="Return each result's document as it was sent.")
    max_chunks_per_doc: JsonInt | None = Field(
        None, ge=1, description="Only 1: ragserve scores one chunk per document, its head cut to the reranker's "
        "window (any other value is a 422 unsupported_max_chunks_per_doc).")
    instruction: Text | None = _INSTRUCTION

    def check_supported(self) -> None:
        if self.max_chunks_per_doc not in (None, 1):
            raise InvalidInput(
                f"max_chunks_per_doc is {self.max_chunks_per_doc}, but ragserve scores one chunk per document "
                "(its head, cut to the reranker's window): send 1 or leave it out",
                code="unsupported_max_chunks_per_doc", param="max_chunks_per_doc")

    def texts(self) -> list[str]:
        """The text each document is ranked on (a 422 naming the document and field that has none)."""
        fields = self.rank_fields or ["text"]
        return [_rank_text({"text": d} if isinstance(d, str) else d, fields, i) for i, d in enumerate(self.documents)]

    def returned(self, index: int) -> dict[str, str]:
        document = self.documents[index]
        return {"text": document} if isinstance(document, str) else document


def _rank_text(document: dict[str, str], fields: list[str], index: int) -> str:
    values = []
    for name in fields:
        value = document.get(name)
        if not value:
            param = f"documents[{index}].{name}"
            raise InvalidInput(f"{param} is {'missing' if value is None else 'empty'}: every rank field must hold "
                               "text in every document", code="invalid_rank_field", param=param)
        values.append(value)
    return values[0] if len(fields) == 1 else "\n".join(f"{n}: {v}" for n, v in zip(fields, values, strict=True))


class RelevantSpans(RequestModel):
    mode: Literal["enabled", "disabled"]
    threshold: float | None = Field(None, allow_inf_nan=False)
    max_spans: JsonInt | None = Field(None, ge=1)


class RerankV2Request(RequestModel):
    """Cohere v2 ``POST /v2/rerank``."""

    query: InputText
    documents: list[InputText] = Field(min_length=1, description="Texts (Cohere v2 takes strings only; format a "
                                       "structured document as YAML text). " + _DOCUMENTS)
    model: str | None = _MODEL
    top_n: JsonInt | None = _TOP_N
    max_tokens_per_doc: JsonInt = Field(
        DEFAULT_MAX_TOKENS_PER_DOC, ge=1, description="Each document is cut to this many tokens, or to what the "
        "reranker's window leaves beside the query and its prompt when that is less.")
    priority: JsonInt = Field(0, ge=0, description="Taken, with no effect: every rerank is served in the runner's "
                              "query lane, in arrival order.")
    relevant_spans: RelevantSpans | None = Field(
        None, description='Only {"mode": "disabled"}: the Qwen3 reranker scores whole documents (no spans).')
    instruction: Text | None = _INSTRUCTION

    def check_supported(self) -> None:
        if self.relevant_spans is not None and self.relevant_spans.mode == "enabled":
            raise InvalidInput("relevant_spans: ragserve's reranker scores whole documents and finds no spans; send "
                               'mode "disabled" or leave it out', code="unsupported_relevant_spans",
                               param="relevant_spans.mode")

    @field_validator("documents", mode="before")
    @classmethod
    def _strings_only(cls, value: Any) -> Any:
        if isinstance(value, list) and any(isinstance(d, dict) for d in value):
            raise refuse("document_not_text", "v2 takes documents as strings; format an object as text (YAML), or "
                         "send it to /v1/rerank with rank_fields")
        return value


class ApiVersion(BaseModel):
    version: Literal["1", "2"]


class RerankTokens(BaseModel):
    input_tokens: int = Field(description="Tokens the reranker scored: prompts, queries and documents.")


class RerankMeta(BaseModel):
    api_version: ApiVersion
    tokens: RerankTokens | None = None


class RerankResult(BaseModel):
    index: int = Field(description="The document's position in the request.")
    relevance_score: float = Field(description="Relevance in (0, 1); results are ordered by it, highest first.")


class RerankV1Result(RerankResult):
    document: dict[str, Any] | None = Field(None, description="The document as sent (a string as {\"text\"}), "
                                            "with return_documents.")


class RerankResponse(BaseModel):
    """Cohere v1's rerank response."""

    id: str = Field(description="The request's id (its X-Request-ID).")
    results: list[RerankV1Result]
    meta: RerankMeta


class RerankV2Response(BaseModel):
    """Cohere v2's rerank response."""

    id: str = Field(description="The request's id (its X-Request-ID).")
    results: list[RerankResult]
    meta: RerankMeta

"""OpenAI's embeddings API (``POST /v1/embeddings``) as ragserve serves it: text inputs only.

Over-length inputs: ``truncate`` (ragserve's extension, named after Cohere's) chooses. ``"END"``, the default,
cuts an input past the embedding model's window to the window (its end goes), as ragserve always has and as
TEI's ``truncate`` does; ``"NONE"`` refuses the request instead (422 ``input_too_long``, naming the input and its
length in tokens), as OpenAI does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from service.api.schemas.common import NonEmptyText, RequestModel, refuse
from service.json_types import JsonInt

InputText = NonEmptyText


class EmbeddingsRequest(RequestModel):
    input: InputText | Annotated[list[InputText], Field(min_length=1)] = Field(
        description="Text or texts to embed, as they are (no instruction added); at most "
        "RAGSERVE_LIMITS__MAX_DOCUMENTS_PER_REQUEST of them. Token ids are refused (422 token_input): ragserve "
        "embeds text, tokenized by the embedding model's own tokenizer."
    )
    model: str | None = Field(None, description="Ignored: ragserve serves its profile's model (see /v1/models).")
    dimensions: JsonInt | None = Field(None, ge=1)
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None
    truncate: Literal["END", "NONE"] = Field(
        "END", description="ragserve's extension, for inputs longer than the embedding model's window: END (the "
        "default) cuts such an input to the window, its end going; NONE refuses the request (422 input_too_long).")

    @field_validator("input", mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        """OpenAI's other input forms get a refusal that says what ragserve takes, not a type error."""
        if value == []:
            raise refuse("empty_input", "an empty list; send a text or a list of texts")
        if type(value) is int or isinstance(value, list) and all(_token_ids(v) for v in value):
            raise refuse("token_input", "token ids are not taken; ragserve embeds text only (its model's own "
                         "tokenizer makes the tokens): send the text or a list of texts")
        return value

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else self.input


def _token_ids(value: Any) -> bool:
    """A token id (an int) or a list of them: OpenAI's ``input: [1, 2]`` and ``[[1, 2], [3]]``."""
    if isinstance(value, list):
        return bool(value) and all(type(v) is int for v in value)
    return type(value) is int


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int = Field(description="The input's position in the request.")
    embedding: list[float] | str = Field(description="The vector: floats, or with encoding_format base64 the "
                                         "little-endian float32 bytes as base64.")


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding] = Field(description="One embedding per input, in input order.")
    model: str = Field(description="The embedding model that answered.")
    usage: EmbeddingsUsage

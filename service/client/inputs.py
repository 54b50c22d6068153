"""What callers hand the client, turned into request bodies: documents, images, chat messages."""

from __future__ import annotations

import base64
import mimetypes
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

ImageArg = Union[str, bytes, "os.PathLike[str]"]
"""An image: an ``http(s)://`` or ``data:`` URL (sent as a URL; ragserve fetches or decodes it), raw bytes, or
a file path (``pathlib.Path``; uploaded). A plain string that is not a URL is refused, not read as a path."""

Message = Mapping[str, Any]


@dataclass(frozen=True)
class Document:
    """An already split document for ``upsert_documents``; the same id replaces."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    vector: list[float] | None = None

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "text": self.text, "metadata": self.metadata}
        if self.vector is not None:
            out["vector"] = self.vector
        return out


def document_body(doc: Document | Mapping[str, Any]) -> dict[str, Any]:
    return doc.body() if isinstance(doc, Document) else dict(doc)


def image_url(image: ImageArg) -> str | None:
    """The URL to send for a URL image; None for bytes or a path (those are uploaded)."""
    if isinstance(image, str):
        if image.startswith(("http://", "https://", "data:")):
            return image
        raise ValueError("a string image must be an http(s) or data: URL; pass a pathlib.Path for a file")
    return None


def image_bytes(image: bytes | os.PathLike[str]) -> tuple[str, bytes, str]:
    """(file name, bytes, content type) of an image to upload."""
    if isinstance(image, bytes):
        return "image", image, "application/octet-stream"
    path = Path(image)
    return path.name, path.read_bytes(), mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def data_url(image: bytes | os.PathLike[str]) -> str:
    """A ``data:`` URL of raw image bytes or a file (for chat messages, which take images as URLs)."""
    _, data, mime = image_bytes(image)
    if mime == "application/octet-stream":
        mime = "image/png"  # ragserve reads the format from the bytes, not from this label
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def chat_messages(messages: str | Sequence[Message], image: ImageArg | None) -> list[dict[str, Any]]:
    """OpenAI-style messages; a string is one user turn. ``image`` joins the last user turn, first (the
    order ragserve's prompt keeps for prefix caching)."""
    out: list[dict[str, Any]] = (
        [{"role": "user", "content": messages}] if isinstance(messages, str) else [dict(m) for m in messages])
    if image is None:
        return out
    if not out or out[-1].get("role") != "user":
        raise ValueError("an image goes with the last message, which must be the user's")
    url = image_url(image) or data_url(image)  # type: ignore[arg-type]
    content = out[-1].get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    out[-1]["content"] = [{"type": "image_url", "image_url": {"url": url}}, *parts]
    return out

"""Wire models of the export and import routes (the export file itself is ``service.transfer.format``)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ImportOut(BaseModel):
    collection: str
    export_id: str = Field(description="The export's id (its header): running the same import again resumes it.")
    points: int = Field(description="Points the file held, checked against its trailer (count and sha256).")
    stored: int = Field(description="Points the collection holds now.")
    created: bool = Field(description="The import created the collection (else it was empty, or resumed).")
    resumed: bool = Field(description="The collection held an unfinished import of this export, now finished.")
    quantization: str | None = Field(
        None, description="The quantization the collection records now: the export's (`int8` or `hnsw-int8`) where "
        "this store records one (the embedded store; its next build builds the int8 copy), else null.")

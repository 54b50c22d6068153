"""Refusals of an import. Each is a 4xx with its own code; none leaves stored data lost.

Hierarchy::

    InvalidExport (422 invalid_export)      a line that does not parse, a header of another format/version,
    │                                       a point that does not fit the header (dimensions, fields)
    ├── ExportTruncated (422 export_truncated)   the stream ends before its trailer (or inside the gzip member)
    └── ExportCorrupt (422 export_corrupt)       the trailer's count or sha256 does not match what came before
    ImportConflict (409)                    the file does not fit this service or the target collection:
                                            model_mismatch, dimension_mismatch, sparse_settings_mismatch,
                                            collection_not_empty, collection_importing, import_in_progress
    ImportInterrupted (400 import_interrupted)  the body ended with the connection (the client went away): the
                                            collection stays marked as importing; the same import resumes it
    (``service.store.errors.CollectionImporting``, 409 collection_importing: a search or an export of a
    collection whose import has not ended, or an import of another export into it)

An :class:`InvalidExport` found after points were written deletes the collection the import created; a
collection that existed before the import (an empty one, or an unfinished import of the same export) is left
as it was, still marked as importing.
"""

from __future__ import annotations

from service.errors import BadRequest, Conflict, InvalidInput


class InvalidExport(InvalidInput):
    code = "invalid_export"

    def __init__(self, message: str, *, line: int | None = None) -> None:
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"the export file is not usable: {where}{message}", param="body")


class ExportTruncated(InvalidExport):
    code = "export_truncated"


class ExportCorrupt(InvalidExport):
    code = "export_corrupt"


class ImportConflict(Conflict):
    """The file does not fit this service or its target collection (``code`` says how)."""

    def __init__(self, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message, code=code, param=param)


class ImportInterrupted(BadRequest):
    code = "import_interrupted"

    def __init__(self) -> None:
        super().__init__("the request body ended with its connection before the export's end: the collection stays "
                         "marked as importing; run the same import again to finish it", param="body")

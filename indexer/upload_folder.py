"""Uploads of the SQLite queue: files under ``<uploads dir>/<job id>/``, on the one host that queue lives on
(the API that stores them and the workers that read them share its file system)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from indexer.queue import Upload


class UploadFolder:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _job_dir(self, job_id: str) -> Path:
        if not job_id or "/" in job_id or job_id in (".", ".."):
            raise ValueError(f"bad job id {job_id!r}")
        return self.root / job_id

    def _path(self, job_id: str, name: str) -> Path:
        rel = PurePosixPath(name)
        if rel.is_absolute() or not rel.parts or any(p in ("..", ".", "") for p in rel.parts):
            raise FileNotFoundError(name)
        return self._job_dir(job_id) / rel

    def save(self, job_id: str, uploads: Sequence[Upload]) -> None:
        """Copy the uploads under the job's folder (blocking: call it in a thread); all or nothing."""
        try:
            for name, src in uploads:
                path = self._path(job_id, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                src.seek(0)
                with open(path, "wb") as out:
                    shutil.copyfileobj(src, out, length=1 << 20)
        except BaseException:
            self.drop(job_id)
            raise

    def read(self, job_id: str, name: str) -> bytes:
        return self._path(job_id, name).read_bytes()

    def drop(self, job_id: str) -> None:
        shutil.rmtree(self._job_dir(job_id), ignore_errors=True)

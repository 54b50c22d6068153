"""What ``/ready`` answers: the same body with 200 (the required capabilities serve) and 503 (one does not)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from service.api.readiness import Status


class ReadinessResponse(BaseModel):
    status: Literal["ready", "degraded", "not_ready"] = Field(
        description="ready: everything serves; degraded: the required capabilities serve, another is down; "
                    "not_ready: a required capability is down (503)."
    )
    required: list[str] = Field(description="The capabilities this answer was asked about (`require`).")
    capabilities: dict[str, Status] = Field(description="search, rerank, generation, indexing: ok, down or disabled.")
    checks: dict[str, Status] = Field(description="Each dependency checked: runners, the store, the job queue.")

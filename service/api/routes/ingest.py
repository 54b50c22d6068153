"""Ingest jobs: submit (a server path, URLs, or uploaded files), follow, cancel."""

from __future__ import annotations

import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi import APIRouter, Query, Request, status
from fastapi import Path as PathParam
from pydantic import ValidationError
from starlette.datastructures import FormData, UploadFile

from indexer.queue import Job, Upload
from indexer.sources import under_root
from indexer.spec import IngestOptions, IngestSpec, PathSource, UploadSource, UrlSource
from service.api.deps import ApiKey, PrincipalDep, ServicesDep
from service.api.json_body import BodyError, JsonRoute, parse_json
from service.api.routes.collections import CollectionName
from service.api.schemas.errors import error_responses
from service.api.schemas.jobs import IngestRequest, JobList, JobOut
from service.api.state import Services
from service.auth.principal import Principal
from service.documents.payload import id_problem
from service.errors import BadRequest, Forbidden, InvalidInput, NotFound, PayloadTooLarge

router = APIRouter(tags=["ingest"], dependencies=[ApiKey], responses=error_responses(403, 404, 507),
                   route_class=JsonRoute)
MAX_OPTIONS_BYTES = 1_000_000
JobId = PathParam(description="A job id, as submitting the job answered it.")


@router.post("/v1/collections/{name}/ingest", status_code=status.HTTP_202_ACCEPTED,
             summary="Submit an ingest job; answers at once with its id",
             description="A JSON body (`IngestRequest`: a server path or URLs) or multipart uploads (`files`, and "
             "`options`: the JSON of `IngestOptions`). The request body is documented by service.api.openapi.")
async def ingest(request: Request, services: ServicesDep, principal: PrincipalDep,
                 name: str = CollectionName) -> JobOut:
    await services.store.describe(name)  # 404 before anything is stored
    services.store.check_writable()  # a full data disk: 507 now, not a job whose every document fails
    job_id = uuid.uuid4().hex
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        limits = services.settings.limits
        async with request.form(max_files=limits.max_upload_files, max_fields=16) as form:
            spec, uploads = await _upload_spec(form, services)
            spec.tenant, spec.submitted_by = principal.tenant, principal.id
            job = await services.jobs.submit(name, spec.model_dump(mode="json"), job_id=job_id, uploads=uploads)
        return JobOut.of(job)
    spec = _json_spec(await _json_body(request), services)
    if isinstance(spec.source, UrlSource):
        for url in spec.source.urls:  # refuse what the worker would refuse, before queueing anything
            await services.fetcher.check(url)
    spec.tenant, spec.submitted_by = principal.tenant, principal.id
    job = await services.jobs.submit(name, spec.model_dump(mode="json"), job_id=job_id)
    return JobOut.of(job)


@router.get("/v1/jobs", summary="Recent jobs (admin keys: all of their collections'; write keys: their own)")
async def list_jobs(services: ServicesDep, principal: PrincipalDep,
                    limit: int = Query(50, ge=1, le=500, description="How many.")) -> JobList:
    jobs = await services.jobs.list(limit=limit)
    return JobList(jobs=[JobOut.of(j) for j in jobs if principal.may_see_job(j.collection, j.spec)])


@router.get("/v1/jobs/{job_id}", summary="A job's state, counts, errors and progress")
async def get_job(services: ServicesDep, principal: PrincipalDep, job_id: str = JobId) -> JobOut:
    return JobOut.of(await _visible_job(job_id, services, principal))


@router.delete("/v1/jobs/{job_id}", status_code=status.HTTP_202_ACCEPTED, summary="Cancel a job")
async def cancel_job(services: ServicesDep, principal: PrincipalDep, job_id: str = JobId) -> JobOut:
    await _visible_job(job_id, services, principal)
    job = await services.jobs.cancel(job_id)
    if job is None:
        raise NotFound(f"job {job_id!r} does not exist", code="job_not_found", param="job_id")
    return JobOut.of(job)


async def _visible_job(job_id: str, services: Services, principal: Principal) -> Job:
    """The job, when this key may see it; another key's job is as absent as one that never existed."""
    job = await services.jobs.get(job_id)
    if job is None or not principal.may_see_job(job.collection, job.spec):
        raise NotFound(f"job {job_id!r} does not exist", code="job_not_found", param="job_id")
    return job


async def _json_body(request: Request) -> Any:
    return parse_json(await request.body())


def _json_spec(body: Any, services: Services) -> IngestSpec:
    try:
        req = IngestRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"{loc}: {first['msg']}", code="validation_error", param=loc or None) from exc
    ingest = services.settings.ingest
    if isinstance(req.source, PathSource):
        path = Path(req.source.path)
        if not path.is_absolute() or not under_root(path, ingest.allowed_roots):
            raise Forbidden(f"path {req.source.path!r} is not under an allowed root (RAGSERVE_INGEST__ALLOWED_ROOTS)",
                            code="path_not_allowed", param="source.path")
        if not path.exists():
            raise NotFound(f"path {req.source.path!r} does not exist", code="path_not_found", param="source.path")
        req.source.path = str(path.resolve())
    return IngestSpec(**req.model_dump(exclude={"source"}), source=req.source)


def _safe_name(filename: str) -> str:
    """The upload's relative path, which becomes its document id: no absolute paths, no '..', and no
    control characters (the rule for ids everywhere)."""
    name = PurePosixPath(filename.replace("\\", "/").lstrip("/"))
    if not filename or id_problem(filename) or any(p in ("..", "") for p in name.parts) or not name.parts:
        raise InvalidInput(f"bad upload file name {filename!r}", code="bad_filename", param="files")
    return name.as_posix()


async def _upload_spec(form: FormData, services: Services) -> tuple[IngestSpec, list[Upload]]:
    """The job's spec and its files (spooled by the form parser; the queue stores them with the job)."""
    ingest = services.settings.ingest
    raw = form.get("options") or "{}"
    if isinstance(raw, UploadFile):  # sent as a file part (curl -F options=@opts.json)
        raw = await raw.read(MAX_OPTIONS_BYTES + 1)
        if len(raw) > MAX_OPTIONS_BYTES:
            raise PayloadTooLarge(f"options: over {MAX_OPTIONS_BYTES} bytes", code="request_too_large",
                                  param="options")
    try:
        options = IngestOptions.model_validate(parse_json(raw, what="the options field"))
    except BodyError as exc:
        raise BadRequest(str(exc.detail), code=exc.code, param="options") from exc
    except ValidationError as exc:
        raise InvalidInput(f"options: {exc.errors()[0]['msg']}", code="validation_error", param="options") from exc
    files = [f for f in form.getlist("files") if isinstance(f, UploadFile)]
    if not files:
        raise InvalidInput("no files uploaded (multipart field 'files')", code="no_files", param="files")
    names = [_safe_name(f.filename or "") for f in files]
    if len(set(names)) != len(names):
        raise InvalidInput("two uploaded files have the same name", code="duplicate_filename", param="files")
    for f in files:
        if f.size is not None and f.size > ingest.max_file_bytes:
            raise PayloadTooLarge(f"{f.filename}: over {ingest.max_file_bytes} bytes", code="file_too_large",
                                  param="files")
    spec = IngestSpec(**options.model_dump(), source=UploadSource(files=names))
    return spec, [(n, f.file) for n, f in zip(names, files, strict=True)]

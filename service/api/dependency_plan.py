"""A route's dependencies solved by a plan made once, rather than by FastAPI's solver on every request.

FastAPI's ``solve_dependencies`` walks a route's dependency tree anew for each request: at every level it
looks up two exit stacks, and converts path, query, header and cookie parameters even where the level has
none. A search has four levels (the route, its services, its key check, the bearer scheme), and with the
content-type parse and the per-request endpoint context that cost about 70 us of the ~470 us of CPU the API
process spends per search under load (issue 20, ``tests/bench/bench_overhead.py``).

A :class:`Plan` is made when the route is: its dependencies flattened, in the order FastAPI's recursion
calls them. A request served by a plan does what FastAPI's handler does, in the same order, with FastAPI's
own functions wherever a result reaches the client:

1. the body is read and parsed (a 400 for a body that is not JSON comes before the key check, as in FastAPI);
2. the dependencies are called, sub-dependencies first, each at most once per request where it allows caching
   (FastAPI's ``use_cache``); their exceptions propagate (a 401, a 403) before any validation error;
3. path, query, header and cookie parameters and the body are validated by ``request_params_to_args`` and
   ``request_body_to_args``, the errors collected in FastAPI's order into one ``RequestValidationError``;
4. the endpoint's result is validated and serialized by ``serialize_response``, into the same response.

The plan covers what this API's routes use. A route with anything else (a generator dependency, a dependency
with parameters of its own, a form body, a ``BackgroundTasks`` or ``Response`` parameter, a sync endpoint, a
chosen ``response_class``) gets no plan, and FastAPI's handler serves it; so does every request while
``app.dependency_overrides`` holds anything (the tests' swaps), and every request with a body whose content
type is not exactly ``application/json`` (FastAPI's own content-type rules then apply).
``tests/service/api/test_dependency_plan.py`` holds the two handlers to the same bytes.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request, Response, params
from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import request_body_to_args, request_params_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, serialize_response
from fastapi.utils import is_body_allowed_for_status_code


@dataclass(frozen=True, slots=True)
class Step:
    """One dependency call: its arguments are earlier steps' results (by index) and the request."""

    call: Callable[..., Awaitable[Any]]
    cache_key: Any
    use_cache: bool
    args: tuple[tuple[str, int], ...]
    request_args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]
    results: tuple[tuple[str, int], ...]
    """The endpoint's arguments from the steps: top-level dependencies with a name."""
    request_args: tuple[str, ...]
    endpoint_context: dict[str, Any]


def make_plan(route: APIRoute) -> Plan | None:
    """The route's plan, or None where the route uses what a plan does not cover."""
    dependant = route.dependant
    if not _plain_endpoint(route):
        return None
    steps: list[Step] = []
    top = _flatten(dependant.dependencies, steps)
    if top is None:
        return None
    context: dict[str, Any] = {"function": getattr(route.endpoint, "__name__", "")}
    try:
        context.update(file=inspect.getsourcefile(route.endpoint), line=inspect.getsourcelines(route.endpoint)[1])
    except (OSError, TypeError):
        pass
    return Plan(steps=tuple(steps), results=tuple((name, i) for name, i in top if name is not None),
                request_args=_request_args(dependant), endpoint_context=context)


def _plain_endpoint(route: APIRoute) -> bool:
    return (_plain_call(route.dependant)
            and not isinstance(getattr(route.body_field, "field_info", None), params.Form)
            and isinstance(route.response_class, DefaultPlaceholder))


def _plain_call(d: Dependant) -> bool:
    """A coroutine function (no generator) taking none of the parameters a plan does not pass: the test the
    endpoint and every dependency meet."""
    return (d.call is not None and d.is_coroutine_callable and not (d.is_gen_callable or d.is_async_gen_callable)
            and d.websocket_param_name is None and d.response_param_name is None
            and d.background_tasks_param_name is None and d.security_scopes_param_name is None)


def _flatten(dependencies: Sequence[Dependant], steps: list[Step]) -> list[tuple[str | None, int]] | None:
    """Append each dependency's step after its own sub-dependencies' (FastAPI's order); the indices of
    ``dependencies``' steps, by name; None for a dependency outside the plan."""
    out: list[tuple[str | None, int]] = []
    for d in dependencies:
        if (d.path_params or d.query_params or d.header_params or d.cookie_params or d.body_params
                or not _plain_call(d)):
            return None
        subs = _flatten(d.dependencies, steps)
        if subs is None:
            return None
        steps.append(Step(call=d.call, cache_key=d.cache_key, use_cache=d.use_cache,
                          args=tuple((name, i) for name, i in subs if name is not None),
                          request_args=_request_args(d)))
        out.append((d.name, len(steps) - 1))
    return out


def _request_args(d: Dependant) -> tuple[str, ...]:
    return tuple(name for name in (d.request_param_name, d.http_connection_param_name) if name is not None)


async def serve(route: APIRoute, plan: Plan, request: Request) -> Response:
    """``request`` answered as FastAPI's handler for ``route`` answers it (see the module's docstring)."""
    dependant = route.dependant
    body: Any = None
    if route.body_field is not None:
        try:
            if await request.body():
                body = await request.json()
        except HTTPException:
            raise
        except Exception as exc:  # what FastAPI answers for a body it could not read
            raise HTTPException(status_code=400, detail="There was an error parsing the body") from exc
    results: list[Any] = []
    cache: dict[Any, Any] = {}
    for step in plan.steps:
        if step.use_cache and step.cache_key in cache:
            value = cache[step.cache_key]
        else:
            kwargs = {name: results[i] for name, i in step.args}
            for name in step.request_args:
                kwargs[name] = request
            value = await step.call(**kwargs)
        cache.setdefault(step.cache_key, value)
        results.append(value)
    values = {name: results[i] for name, i in plan.results}
    errors: list[Any] = []
    for fields, received in ((dependant.path_params, request.path_params),
                             (dependant.query_params, request.query_params),
                             (dependant.header_params, request.headers),
                             (dependant.cookie_params, request.cookies)):
        if fields:
            got, wrong = request_params_to_args(fields, received)
            values.update(got)
            errors += wrong
    if dependant.body_params:
        got, wrong = await request_body_to_args(body_fields=dependant.body_params, received_body=body,
                                                embed_body_fields=route._embed_body_fields)
        values.update(got)
        errors += wrong
    context = {**plan.endpoint_context, "path": f"{request.method} {request.scope.get('root_path', '').rstrip('/')}"
               f"{dependant.path}"}
    if errors:
        raise RequestValidationError(errors, body=body, endpoint_ctx=context)  # type: ignore[arg-type]
    for name in plan.request_args:
        values[name] = request
    assert dependant.call is not None
    raw = await dependant.call(**values)
    if isinstance(raw, Response):
        return raw
    dump_json = route.response_field is not None
    content = await serialize_response(
        field=route.response_field, response_content=raw, include=route.response_model_include,
        exclude=route.response_model_exclude, by_alias=route.response_model_by_alias,
        exclude_unset=route.response_model_exclude_unset, exclude_defaults=route.response_model_exclude_defaults,
        exclude_none=route.response_model_exclude_none, is_coroutine=True, endpoint_ctx=context,  # type: ignore[arg-type]
        dump_json=dump_json,
    )
    status = {"status_code": route.status_code} if route.status_code else {}
    response_class: type[Response] = route.response_class.value  # type: ignore[union-attr]
    response = (Response(content=content, media_type="application/json", background=None, **status) if dump_json
                else response_class(content, background=None, **status))
    if not is_body_allowed_for_status_code(response.status_code):
        response.body = b""
    return response

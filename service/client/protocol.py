"""The one implementation behind :class:`~service.client.Client` and :class:`~service.client.AsyncClient`.

Every operation is written once, without I/O, as a generator (sans-I/O): it yields a :class:`Call` (one HTTP
exchange) or a :class:`Sleep` (a pause between job polls or before a retry) and is sent back the
``httpx.Response``, or has the typed error thrown in at the ``yield`` (so an operation may catch
``NotFound`` and go on). Its ``return`` is the result. The sync client drives it with ``httpx.Client`` and
``time.sleep``, the async one with ``httpx.AsyncClient`` and ``asyncio.sleep``; nothing else differs.

:class:`operation` is the descriptor that turns such a generator method into a plain method on ``Client``
and a coroutine method on ``AsyncClient``, typed for both (its ``__get__`` overloads).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import httpx

from service.client.errors import ConnectionFailed, RagserveClientError, Timeout, error_from_response

if TYPE_CHECKING:
    from service.client.aio import AsyncClient
    from service.client.streaming import AsyncChatStream, ChatStream, ChatStreamDecoder
    from service.client.sync import Client

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One HTTP exchange, relative to the client's base URL."""

    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    files: list[tuple[str, tuple[str, bytes, str]]] | None = None
    data: dict[str, str] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Sleep:
    seconds: float


Step = Call | Sleep
Operation = Generator[Step, "httpx.Response | None", T]
"""Yields steps, is sent each Call's response (None after a Sleep), returns the result."""


@dataclass(frozen=True)
class StreamCall:
    """A streamed exchange: the request, and the decoder its server-sent events go through."""

    call: Call
    decoder: Callable[[], ChatStreamDecoder]


def _unbound(fn: Callable[..., Any]) -> inspect.Signature:
    """The signature callers see: without ``self``, and without the generator's return type."""
    sig = inspect.signature(fn)
    return sig.replace(parameters=list(sig.parameters.values())[1:], return_annotation=inspect.Signature.empty)


class operation(Generic[P, T]):  # noqa: N801 - used as a decorator, like property
    """A sans-I/O generator method exposed as ``Client.name(...) -> T`` and
    ``AsyncClient.name(...) -> Awaitable[T]``."""

    def __init__(self, fn: Callable[Concatenate[Any, P], Operation[T]]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]
        self.signature = _unbound(fn)

    @overload
    def __get__(self, obj: None, owner: type) -> operation[P, T]: ...
    @overload
    def __get__(self, obj: Client, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        fn = self.fn

        @functools.wraps(fn)
        def bound(*args: Any, **kwargs: Any) -> Any:
            return obj._drive(fn(obj, *args, **kwargs))

        bound.__signature__ = self.signature  # type: ignore[attr-defined]
        return bound


class streaming(Generic[P]):  # noqa: N801
    """A method building a :class:`StreamCall`, exposed as ``Client.name(...) -> ChatStream`` and
    ``AsyncClient.name(...) -> AsyncChatStream`` (context managers and iterators of text deltas)."""

    def __init__(self, fn: Callable[Concatenate[Any, P], StreamCall]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]
        self.signature = _unbound(fn)

    @overload
    def __get__(self, obj: None, owner: type) -> streaming[P]: ...
    @overload
    def __get__(self, obj: Client, owner: type) -> Callable[P, ChatStream]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type) -> Callable[P, AsyncChatStream]: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        fn = self.fn

        @functools.wraps(fn)
        def bound(*args: Any, **kwargs: Any) -> Any:
            return obj._open_stream(fn(obj, *args, **kwargs))

        bound.__signature__ = self.signature  # type: ignore[attr-defined]
        return bound


def request_args(call: Call, auth: dict[str, str]) -> dict[str, Any]:
    """``httpx`` keyword arguments for a call (the same for its sync and async clients)."""
    args: dict[str, Any] = {"headers": {**auth, **call.headers}}
    for name in ("json", "params", "files", "data"):
        value = getattr(call, name)
        if value is not None:
            args[name] = value
    return args


def transport_error(exc: httpx.TransportError) -> RagserveClientError:
    if isinstance(exc, httpx.TimeoutException):
        return Timeout(f"no answer in time: {exc!r}", status_code=None, code="client_timeout")
    return ConnectionFailed(f"cannot reach ragserve: {exc!r}")


def check(response: httpx.Response) -> httpx.Response:
    """The response, or its error envelope raised as the typed exception (the body must have been read)."""
    if response.status_code >= 400:
        raise error_from_response(response.status_code, response.headers, response.content)
    return response

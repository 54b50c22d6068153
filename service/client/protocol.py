"""The one implementation behind :class:`~service.client.Client` and :class:`~service.client.AsyncClient`.

Every operation is written once, without I/O, as a generator (sans-I/O): it yields a
:class:`~service.client.steps.Call` (one HTTP exchange) or a :class:`~service.client.steps.Sleep` (a pause
between job polls or before a retry) and is sent back the ``httpx.Response``, or has the typed error thrown in
at the ``yield`` (so an operation may catch ``NotFound`` and go on). Its ``return`` is the result. The sync
client drives it with ``httpx.Client`` and ``time.sleep``, the async one with ``httpx.AsyncClient`` and
``asyncio.sleep``; nothing else differs.

:class:`operation` is the descriptor that turns such a generator method into a plain method on ``Client``
and a coroutine method on ``AsyncClient``, typed for both (its ``__get__`` overloads, which tell the two apart
by their ``blocking`` marker: this module imports neither client, so the client modules import in one direction:
steps <- streaming <- protocol <- api <- sync, aio).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

import httpx

from .errors import ConnectionFailed, RagserveClientError, Timeout, error_from_response
from .steps import Call, Operation
from .streaming import AsyncChatStream, ChatStream, StreamCall

P = ParamSpec("P")
T = TypeVar("T")


class Blocking(Protocol):
    """What the descriptors see of :class:`~service.client.Client` (named by a marker, not imported: the clients
    import this module)."""

    @property
    def blocking(self) -> Literal[True]: ...


class Awaiting(Protocol):
    """What the descriptors see of :class:`~service.client.AsyncClient`."""

    @property
    def blocking(self) -> Literal[False]: ...


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
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: Awaiting, owner: type) -> Callable[P, Awaitable[T]]: ...

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
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, ChatStream]: ...
    @overload
    def __get__(self, obj: Awaiting, owner: type) -> Callable[P, AsyncChatStream]: ...

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

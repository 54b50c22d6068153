"""Why ragserve refused, or failed, to fetch a URL. Each is a 4xx: the URL came from the caller.

Hierarchy::

    FetchError (BadRequest 400, fetch_failed)
    ├── URLNotAllowed (400, url_not_allowed)              bad scheme, credentials, host not on the allowlist
    ├── AddressNotAllowed (400, url_address_not_allowed)  the host is, or resolves to, a non-public address
    ├── RedirectNotAllowed (400, redirect_not_allowed)    a redirect that fails the same checks, or too many
    ├── FetchTooLarge (413, fetched_body_too_large)       the body passed the byte cap
    ├── FetchTimeout (422, fetch_timeout)                 no complete answer within the fetch timeout
    └── FetchUnavailable (422, url_unreachable)           DNS failure, refused connection, a 4xx/5xx answer
"""

from __future__ import annotations

from service.errors import BadRequest


class FetchError(BadRequest):
    code = "fetch_failed"


class URLNotAllowed(FetchError):
    code = "url_not_allowed"


class AddressNotAllowed(FetchError):
    code = "url_address_not_allowed"


class RedirectNotAllowed(FetchError):
    code = "redirect_not_allowed"


class FetchTooLarge(FetchError):
    status_code = 413
    code = "fetched_body_too_large"


class FetchTimeout(FetchError):
    status_code = 422
    code = "fetch_timeout"


class FetchUnavailable(FetchError):
    status_code = 422
    code = "url_unreachable"

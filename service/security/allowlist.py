"""Domain allowlists: ``example.com`` admits that host only, ``*.example.com`` its subdomains too."""

from __future__ import annotations

from urllib.parse import urlsplit


def host_allowed(url: str, allowlist: list[str]) -> bool:
    """True for an http(s) URL whose host is on ``allowlist`` (names, not resolved addresses: the fetcher
    checks those separately, at connection time)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return False
    host = parts.hostname.lower().rstrip(".")
    for entry in allowlist:
        entry = entry.lower().rstrip(".")
        if entry.startswith("*."):
            if host == entry[2:] or host.endswith(entry[1:]):
                return True
        elif host == entry:
            return True
    return False

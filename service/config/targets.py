"""What a runner URL setting names: one replica, several, or a DNS name that resolves to several.

A setting (``RAGSERVE_RUNNERS__EMBED_URL`` and its siblings) is one URL, a comma-separated list of URLs, or a
JSON list of them. Each entry is either

- ``http(s)://host:port``: one replica at that address, or
- ``dns+http(s)://name:port``: one replica per address ``name`` resolves to, resolved again every
  ``RAGSERVE_UPSTREAM__DNS_REFRESH_S`` (a Kubernetes headless Service lists its ready pods this way).

A single plain URL is what the setting always was: a pool of one, which behaves exactly as the one runner did.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

DNS_PREFIX = "dns+"
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    resolve: bool
    """True for ``dns+``: ``host`` is a name whose every address is a replica."""

    @property
    def url(self) -> str:
        """The replica's base URL (for a ``dns+`` target, the name's; each address gets its own)."""
        return replica_url(self.scheme, self.host, self.port)


def replica_url(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def split_entries(value: str | Sequence[str]) -> list[str]:
    """The entries of a setting: a JSON list, a comma-separated list, or a list already."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                loaded = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"runner URL list is not valid JSON: {exc}") from exc
            if not isinstance(loaded, list) or not all(isinstance(v, str) for v in loaded):
                raise ValueError("a JSON runner URL list must be a list of strings")
            entries: Sequence[str] = loaded
        else:
            entries = text.split(",")
    else:
        entries = value
    return [e.strip() for e in entries if e.strip()]


def _shown(entry: str) -> str:
    """The entry as an error may echo it: without any ``user:password@`` (a setting may carry a secret)."""
    scheme, sep, rest = entry.partition("://")
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if "@" in rest.split("/")[0] else entry


def parse_target(entry: str) -> Target:
    parts = urlsplit(entry)
    shown = _shown(entry)
    scheme = parts.scheme.lower()
    resolve = scheme.startswith(DNS_PREFIX)
    scheme = scheme.removeprefix(DNS_PREFIX)
    if scheme not in SCHEMES:
        raise ValueError(f"runner URL {shown!r}: the scheme must be http, https, dns+http or dns+https")
    if not parts.hostname:
        raise ValueError(f"runner URL {shown!r} has no host")
    if parts.path.strip("/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"runner URL {shown!r}: only scheme, host and port (a runner's base URL)")
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError as exc:
        raise ValueError(f"runner URL {shown!r}: {exc}") from exc
    return Target(scheme, parts.hostname, port, resolve)


def parse_targets(value: str | Sequence[str]) -> tuple[Target, ...]:
    """Every target a setting names, in order, each once; at least one."""
    targets = tuple(dict.fromkeys(parse_target(e) for e in split_entries(value)))
    if not targets:
        raise ValueError("a runner URL setting needs at least one URL")
    return targets


def canonical(value: str | Sequence[str]) -> str:
    """The setting written back as one comma-separated string (how it is stored in Settings)."""
    parse_targets(value)
    return ",".join(split_entries(value))

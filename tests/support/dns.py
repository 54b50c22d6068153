"""A DNS edge for tests: names resolve to the addresses the test says (the fetcher's ``resolver`` hook)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from service.security.addresses import IPAddress


class MapResolver:
    def __init__(self, answers: dict[str, Sequence[str]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.calls.append(host)
        if host not in self.answers:
            raise OSError(f"no such host {host}")
        return [ipaddress.ip_address(a) for a in self.answers[host]]

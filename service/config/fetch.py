"""``RAGSERVE_FETCH__*``: URLs ragserve fetches (allowlist, sizes)."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from service.config.common import _comma_list


class FetchSettings(BaseModel):
    """ragserve's own fetching of URLs (images in requests; documents for the indexer).

    Only hosts on ``allowed_domains`` are fetched; every address a host resolves to must be public (not
    private, loopback, link-local, multicast, reserved or a cloud metadata address) unless it lies in
    ``allowed_networks`` (an explicit exception, e.g. 127.0.0.1/32 for a local test server).
    """

    allowed_domains: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts that may be fetched, comma-separated: 'example.com' exactly, '.example.com' for its "
        "subdomains. Empty: URL fetching is off.",
    )
    allowed_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="CIDRs exempt from the public-address rule (tests, intranets), "
        "comma-separated."
    )
    timeout_s: float = Field(10.0, description="Whole fetch, redirects and body included.")
    connect_timeout_s: float = Field(3.0, description="Connect timeout of one fetch.")
    max_redirects: int = Field(
        3, ge=0, description="Redirects followed, each checked as the first URL; one more is 400 redirect_not_allowed."
    )
    max_concurrency: int = Field(8, description="Fetches in flight.")

    @field_validator("allowed_domains", "allowed_networks", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _comma_list(value)

    @field_validator("allowed_networks")
    @classmethod
    def _cidrs(cls, networks: list[str]) -> list[str]:
        for net in networks:
            ipaddress.ip_network(net, strict=False)  # raises ValueError with a clear message
        return networks

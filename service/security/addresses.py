"""Which IP addresses ragserve may connect to on a caller's behalf, and what a URL's host really names.

An address is fetchable when it is public: not private, loopback, link-local, multicast, reserved,
unspecified, shared (100.64/10) or a cloud metadata address. IPv6 forms that carry an IPv4 address
(IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by the IPv4 address
they carry, so ``[::ffff:127.0.0.1]`` is loopback. Host names written as numbers in the forms C's
``inet_aton`` accepts (``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1``) are IPv4 literals, and are
recognised as such here instead of being left to a resolver that would quietly turn them into 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NUMERIC_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*)$")


def parse_ipv4_number_forms(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a numeric host denotes in any ``inet_aton`` form, or None if it is not one.

    ``a.b.c.d``, ``a.b.c`` (c is 16 bits), ``a.b`` (b is 24 bits) and ``a`` (32 bits); each part decimal,
    octal (leading 0) or hexadecimal (0x).
    """
    parts = host.split(".")
    if host.endswith("."):  # a trailing dot is the root label, not a part
        parts = parts[:-1]
    if not 1 <= len(parts) <= 4 or not all(_NUMERIC_PART.match(p) for p in parts):
        return None
    values = [_number(p) for p in parts]
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    number = number * 256 ** (4 - len(head)) + last
    return ipaddress.IPv4Address(number)


def _number(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part[0] == "0":
        return int(part, 8)
    return int(part)


def literal_address(host: str) -> IPAddress | None:
    """The address a URL host is written as (``[v6]`` brackets removed), or None for a name."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    bare = bare.split("%", 1)[0]  # an IPv6 zone id does not change which address it is
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        return parse_ipv4_number_forms(bare)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def why_not_public(address: IPAddress) -> str | None:
    """None when ``address`` may be fetched from; otherwise the kind of address it is, for a message."""
    inner = embedded_ipv4(address)
    if inner is not None:
        reason = why_not_public(inner)
        return f"{reason} (carried in an IPv6 address)" if reason else None
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for kind, flag in (("a loopback", address.is_loopback), ("a link-local", address.is_link_local),
                       ("a multicast", address.is_multicast), ("an unspecified", address.is_unspecified),
                       ("a reserved", address.is_reserved),
                       ("a private", address.is_private)):
        if flag:
            return f"{kind} address"
    if not address.is_global:
        return "a non-public address"
    return None


class AddressPolicy:
    """Public addresses only, except those in ``allowed_networks`` (an explicit operator choice)."""

    def __init__(self, allowed_networks: Iterable[str] = ()) -> None:
        self.allowed_networks = [ipaddress.ip_network(n, strict=False) for n in allowed_networks]

    def refusal(self, address: IPAddress) -> str | None:
        """None when ragserve may connect to ``address``; else why not."""
        candidates = [address]
        inner = embedded_ipv4(address)
        if inner is not None:
            candidates.append(inner)
        if any(a in net for a in candidates for net in self.allowed_networks if a.version == net.version):
            return None
        return why_not_public(address)

from __future__ import annotations

import ipaddress

import pytest

from service.security.addresses import AddressPolicy, literal_address, parse_ipv4_number_forms, why_not_public


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),  # decimal
        ("0x7f000001", "127.0.0.1"),  # hexadecimal
        ("0177.0.0.1", "127.0.0.1"),  # octal part
        ("0x7f.1", "127.0.0.1"),  # a.b with b 24 bits
        ("127.1", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("169.254.43518", "169.254.169.254"),  # a.b.c with c 16 bits
        ("0", "0.0.0.0"),
        ("1.2.3.4.", "1.2.3.4"),  # trailing root dot
    ],
)
def test_numeric_ipv4_forms_are_recognised(host: str, address: str) -> None:
    assert parse_ipv4_number_forms(host) == ipaddress.IPv4Address(address)


@pytest.mark.parametrize("host", ["example.com", "1.2.3.4.5", "256.1.1.1", "1.16777216", "08.1.1.1", "1e3"])
def test_names_and_out_of_range_numbers_are_not_ipv4(host: str) -> None:
    assert parse_ipv4_number_forms(host) is None


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("127.0.0.1", "loopback"), ("[::1]", "loopback"), ("10.0.0.1", "private"), ("172.16.5.4", "private"),
        ("192.168.1.1", "private"), ("169.254.169.254", "metadata"), ("[fd00:ec2::254]", "metadata"),
        ("100.100.100.200", "metadata"), ("169.254.1.1", "link-local"), ("[fe80::1]", "link-local"),
        ("224.0.0.1", "multicast"), ("[ff02::1]", "multicast"), ("0.0.0.0", "unspecified"), ("[::]", "unspecified"),
        ("240.0.0.1", "reserved"), ("100.64.0.1", "non-public"), ("[fc00::1]", "private"),
        ("[::ffff:127.0.0.1]", "loopback"), ("[::ffff:169.254.169.254]", "metadata"),
        ("[64:ff9b::a00:1]", "private"), ("[2002:7f00:1::]", "loopback"), ("2130706433", "loopback"),
    ],
)
def test_non_public_addresses_are_named(host: str, kind: str) -> None:
    address = literal_address(host)
    assert address is not None
    reason = why_not_public(address)
    assert reason is not None and kind in reason


@pytest.mark.parametrize("host", ["8.8.8.8", "1.1.1.1", "[2606:4700:4700::1111]", "93.184.216.34"])
def test_public_addresses_pass(host: str) -> None:
    address = literal_address(host)
    assert address is not None and why_not_public(address) is None


def test_allowed_networks_are_an_explicit_exception() -> None:
    policy = AddressPolicy(["127.0.0.1/32"])
    assert policy.refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert policy.refusal(ipaddress.ip_address("::ffff:127.0.0.1")) is None  # same address, mapped form
    assert "loopback" in (policy.refusal(ipaddress.ip_address("127.0.0.2")) or "")
    assert "metadata" in (policy.refusal(ipaddress.ip_address("169.254.169.254")) or "")

"""Configured API keys, stored as hashes: the entry format and the two hash schemes.

An entry (in ``RAGSERVE_API_KEYS_FILE`` or ``RAGSERVE_API_KEY_HASHES``)::

    {"id": "search-app", "sha256": "<64 hex>", "scopes": ["read"], "collections": ["kb"],
     "tenant": {"field": "org", "value": "acme"}}

``sha256`` is the hex SHA-256 of the key, right for the random keys ``ragserve keys hash`` makes (256 bits:
nothing to brute-force). ``scrypt`` (``scrypt$<log2 N>$<r>$<p>$<salt>$<hash>``, base64url) is for keys a
person chose: verifying one costs tens of milliseconds, so ragserve caches keys it has verified.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from service.config.keys import ScryptHash

SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P = 15, 8, 1
"""OWASP's scrypt minimum is N=2^17 with r=8; 2^15 (32 MiB, ~0.1 s) is kept for keys, which are cached."""


def sha256_hex(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def scrypt_hash(key: str, *, log2_n: int = SCRYPT_LOG2_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    salt = secrets.token_bytes(16)
    return str(ScryptHash(log2_n, r, p, salt, _scrypt(key, salt, log2_n, r, p, 32)))


def new_key() -> str:
    """A fresh key: 32 random bytes, URL-safe, with a prefix that secret scanners can match."""
    return "rs-" + secrets.token_urlsafe(32)


def _scrypt(key: str, salt: bytes, log2_n: int, r: int, p: int, dklen: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(key.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=dklen, maxmem=256 * n * r + (1 << 20))


def matches(stored: ScryptHash, key: str) -> bool:
    """Whether ``key`` is the one ``stored`` was made from (constant-time)."""
    derived = _scrypt(key, stored.salt, stored.log2_n, stored.r, stored.p, len(stored.hash))
    return hmac.compare_digest(derived, stored.hash)

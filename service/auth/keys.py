"""Configured API keys, stored as hashes: the entry format and the two hash schemes.

An entry (in ``RAGSERVE_API_KEYS_FILE`` or ``RAGSERVE_API_KEY_HASHES``)::

    {"id": "search-app", "sha256": "<64 hex>", "scopes": ["read"], "collections": ["kb"],
     "tenant": {"field": "org", "value": "acme"}}

``sha256`` is the hex SHA-256 of the key, right for the random keys ``ragserve keys hash`` makes (256 bits:
nothing to brute-force). ``scrypt`` (``scrypt$<log2 N>$<r>$<p>$<salt>$<hash>``, base64url) is for keys a
person chose: verifying one costs tens of milliseconds, so ragserve caches keys it has verified.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.auth.principal import Scope
from service.store.tenancy import TENANT_FIELD_RE

COLLECTION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$"  # service.api.schemas.collections.COLLECTION_NAME
SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P = 15, 8, 1
"""OWASP's scrypt minimum is N=2^17 with r=8; 2^15 (32 MiB, ~0.1 s) is kept for keys, which are cached."""


class TenantEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    field: str = Field(pattern=TENANT_FIELD_RE.pattern, description="A top-level metadata field, e.g. 'org'.")
    value: str = Field(min_length=1, max_length=256, description="This key's value of it.")


class ApiKeyEntry(BaseModel):
    """One key: its hash and what it may do."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$",
                           description="A label for logs and job ownership (default: from the hash).")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="Hex SHA-256 of the key.")
    scrypt: str | None = Field(None, description="scrypt$<log2 N>$<r>$<p>$<salt>$<hash> (base64url).")
    scopes: list[Scope] = Field(min_length=1, description="Any of read, write, admin.")
    collections: list[Annotated[str, Field(pattern=COLLECTION_PATTERN)]] | None = Field(
        None, description="The collections this key may reach (absent: all)."
    )
    tenant: TenantEntry | None = Field(None, description="Stamped on every write, added to every query filter.")

    @model_validator(mode="after")
    def _check(self) -> ApiKeyEntry:
        if (self.sha256 is None) == (self.scrypt is None):
            raise ValueError("give exactly one of 'sha256' and 'scrypt'")
        if self.scrypt is not None:
            ScryptHash.parse(self.scrypt)
        if self.tenant is not None and "admin" in self.scopes:
            raise ValueError("a key with a tenant cannot hold 'admin' (collection deletes and every job reach "
                             "every tenant)")
        return self

    @property
    def default_id(self) -> str:
        digest = self.sha256 or hashlib.sha256((self.scrypt or "").encode()).hexdigest()
        return f"key-{digest[:12]}"


@dataclass(frozen=True)
class ScryptHash:
    log2_n: int
    r: int
    p: int
    salt: bytes
    hash: bytes

    @classmethod
    def parse(cls, text: str) -> ScryptHash:
        parts = text.split("$")
        try:
            if len(parts) != 6 or parts[0] != "scrypt":
                raise ValueError
            log2_n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
            salt, digest = _unb64(parts[4]), _unb64(parts[5])
        except ValueError:
            raise ValueError("scrypt must read scrypt$<log2 N>$<r>$<p>$<salt>$<hash>") from None
        if not (10 <= log2_n <= 20 and 1 <= r <= 32 and 1 <= p <= 16 and len(salt) >= 16 and len(digest) >= 32):
            raise ValueError("scrypt parameters out of range (log2 N 10-20, r 1-32, p 1-16, salt 16+ bytes)")
        return cls(log2_n, r, p, salt, digest)

    def matches(self, key: str) -> bool:
        derived = _scrypt(key, self.salt, self.log2_n, self.r, self.p, len(self.hash))
        return hmac.compare_digest(derived, self.hash)

    def __str__(self) -> str:
        return f"scrypt${self.log2_n}${self.r}${self.p}${_b64(self.salt)}${_b64(self.hash)}"


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


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

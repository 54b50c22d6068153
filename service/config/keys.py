"""API key entries as ``RAGSERVE_API_KEY_ENTRIES`` holds them: their fields, scopes and tenant, and the format of
a stored scrypt hash. Checking a key against a hash is :mod:`service.auth.keys`'."""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.config.scopes import Scope

COLLECTION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$"  # service.api.schemas.collections.COLLECTION_NAME
TENANT_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
"""A tenant's field: a top-level metadata field name (the store's tenancy and the key entries share the rule)."""


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

    def __str__(self) -> str:
        return f"scrypt${self.log2_n}${self.r}${self.p}${_b64(self.salt)}${_b64(self.hash)}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

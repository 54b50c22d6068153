"""The keys a deployment accepts, and checking an offered key against them.

Sources, all optional, all merged: plain ``RAGSERVE_API_KEYS`` (full access: every scope, every collection,
no tenant), hashed entries in ``RAGSERVE_API_KEY_HASHES`` (JSON) and in ``RAGSERVE_API_KEYS_FILE`` (a JSON,
YAML or TOML list of entries; see :mod:`service.auth.keys`).

Checking: the offered key's SHA-256 is compared with every SHA-256 entry with ``hmac.compare_digest``, with
no early exit, so the time taken says nothing about which entry (or how much of one) matched. Plain keys
are hashed at start-up and checked the same way. scrypt entries are tried only when no SHA-256 entry
matched, in a thread (each try is a deliberately slow derivation); keys that verified are remembered by
their SHA-256 for the process's life (bounded), so a client pays the derivation once.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from service.auth.keys import matches
from service.auth.principal import SCOPES, Principal
from service.config.keys import ApiKeyEntry, ScryptHash
from service.store.tenancy import Tenant

MAX_KEY_CHARS = 512
VERIFIED_CACHE = 1024
if TYPE_CHECKING:
    from service.config import Settings

_ENTRIES = TypeAdapter(list[ApiKeyEntry])


class KeyConfigError(ValueError):
    """The configured keys cannot be used: a bad keys file or entry, duplicates, or no key at all."""


@dataclass(frozen=True)
class _Stored:
    principal: Principal
    sha256: bytes | None = None
    scrypt: ScryptHash | None = None


class KeyRing:
    def __init__(self, stored: Sequence[_Stored]) -> None:
        self._sha = [s for s in stored if s.sha256 is not None]
        self._scrypt = [s for s in stored if s.scrypt is not None]
        self._verified: OrderedDict[bytes, Principal] = OrderedDict()
        ids = [s.principal.id for s in stored]
        if len(set(ids)) != len(ids):
            raise KeyConfigError(f"API key ids must be unique: {sorted({i for i in ids if ids.count(i) > 1})}")
        digests = [s.sha256 for s in self._sha]
        if len(set(digests)) != len(digests):
            raise KeyConfigError("the same API key is configured twice")

    def __len__(self) -> int:
        return len(self._sha) + len(self._scrypt)

    @classmethod
    def build(cls, plain: Sequence[str], entries: Sequence[ApiKeyEntry]) -> KeyRing:
        stored = [_Stored(Principal(f"env-{i}", frozenset(SCOPES)), sha256=_digest(key))
                  for i, key in enumerate(plain, 1)]
        for e in entries:
            tenant = Tenant(e.tenant.field, e.tenant.value) if e.tenant is not None else None
            principal = Principal(e.id or e.default_id, frozenset(e.scopes),
                                  frozenset(e.collections) if e.collections is not None else None, tenant)
            if e.sha256 is not None:
                stored.append(_Stored(principal, sha256=bytes.fromhex(e.sha256)))
            else:
                assert e.scrypt is not None
                stored.append(_Stored(principal, scrypt=ScryptHash.parse(e.scrypt)))
        return cls(stored)

    async def authenticate(self, offered: str) -> Principal | None:
        if not offered or len(offered) > MAX_KEY_CHARS:
            return None
        digest = _digest(offered)
        found: Principal | None = None
        for s in self._sha:  # every entry, no early exit
            assert s.sha256 is not None
            if hmac.compare_digest(digest, s.sha256) and found is None:
                found = s.principal
        if found is not None or not self._scrypt:
            return found
        cached = self._verified.get(digest)
        if cached is not None:
            return cached
        found = await asyncio.to_thread(self._try_scrypt, offered)
        if found is not None:
            self._verified[digest] = found
            while len(self._verified) > VERIFIED_CACHE:
                self._verified.popitem(last=False)
        return found

    def _try_scrypt(self, offered: str) -> Principal | None:
        found = None
        for s in self._scrypt:
            assert s.scrypt is not None
            if matches(s.scrypt, offered) and found is None:
                found = s.principal
        return found


def load_key_file(path: Path) -> list[ApiKeyEntry]:
    """Entries from a JSON, YAML or TOML file: a list, or a table/object with a ``keys`` list."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KeyConfigError(f"cannot read the API keys file {path}: {exc.strerror}") from None
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml", ".toml"):
        raise KeyConfigError(f"the API keys file {path} must end in .json, .yaml, .yml or .toml")
    try:
        data: Any
        if suffix == ".json":
            data = json.loads(text)
        elif suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib
            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # json's and tomllib's ValueErrors, yaml.YAMLError
        raise KeyConfigError(f"the API keys file {path} does not parse: {exc}") from None
    if isinstance(data, dict) and set(data) == {"keys"}:
        data = data["keys"]
    try:
        return _ENTRIES.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "keys" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        raise KeyConfigError(f"the API keys file {path}: {where}: {first['msg']}") from None


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def keyring_from_settings(settings: Settings) -> KeyRing:
    """Every key the settings configure; KeyConfigError (naming the file and entry) for a bad keys file."""
    entries = list(settings.api_key_hashes)
    if settings.api_keys_file is not None:
        entries += load_key_file(settings.api_keys_file)
    return KeyRing.build([k.get_secret_value() for k in settings.api_keys], entries)

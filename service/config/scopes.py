"""What a key may do: ``read``, ``write``, ``admin`` (:mod:`service.auth.principal` says what each allows)."""

from __future__ import annotations

from typing import Literal

Scope = Literal["read", "write", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "write", "admin")

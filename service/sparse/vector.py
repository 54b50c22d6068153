"""A sparse vector: what the BM25 encoder makes and the store keeps beside the dense one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SparseVector:
    indices: list[int]
    values: list[float]

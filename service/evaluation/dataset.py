"""BEIR layout: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/{split}.tsv``."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class BeirDataset:
    root: Path

    def corpus(self) -> Iterator[dict[str, Any]]:
        """Documents as ragserve documents: id, text = title + " " + text, metadata."""
        with open(self.root / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                row = json.loads(line)
                title = (row.get("title") or "").strip()
                text = (row.get("text") or "").strip()
                meta = {"title": title} if title else {}
                yield {"id": str(row["_id"]), "text": f"{title} {text}".strip(), "metadata": meta}

    def queries(self, split: str) -> dict[str, str]:
        wanted = set(self.qrels(split))
        out: dict[str, str] = {}
        with open(self.root / "queries.jsonl", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    if str(row["_id"]) in wanted:
                        out[str(row["_id"])] = row["text"]
        return out

    def qrels(self, split: str) -> dict[str, dict[str, int]]:
        qrels: dict[str, dict[str, int]] = {}
        with open(self.root / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
            reader = csv.reader(f, delimiter="\t")
            for row in reader:
                if not row or row[0] in ("query-id", "query_id"):
                    continue
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
        return qrels

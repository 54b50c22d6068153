"""A small collection the adapter tests search."""

from __future__ import annotations

from service.client import Client, Document

DOCS = [
    Document("espresso", "Espresso forces hot water through finely ground coffee.", {"tag": "coffee"}),
    Document("tea", "Green tea is steeped at about eighty degrees.", {"tag": "tea"}),
    Document("bread", "Sourdough bread rises with a wild yeast starter.", {"tag": "baking"}),
]


def seed(client: Client, name: str = "kb") -> None:
    client.create_collection(name, filter_fields={"tag": "keyword"})
    client.upsert_documents(name, DOCS)

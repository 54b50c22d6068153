"""Indexing worker: sources -> chunks -> embeddings -> Qdrant (see issue 3)."""

"""The retrieval pipeline: embed the query, search Qdrant, rerank."""

"""ragserve: a RAG retrieval microservice over vLLM pooling runners and Qdrant."""

__version__ = "0.1.0"

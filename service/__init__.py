"""ragserve: a RAG retrieval microservice over vLLM pooling runners and Qdrant."""

from service.client.version import VERSION as __version__  # one number for the server and its client

__all__ = ["__version__"]

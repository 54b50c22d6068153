"""Vector storage in Qdrant."""

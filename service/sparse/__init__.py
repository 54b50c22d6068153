"""Sparse lexical vectors (BM25) beside the dense ones."""

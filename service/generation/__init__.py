"""Generation: the VL chat runner client, image-to-query, grounded answers with citations."""

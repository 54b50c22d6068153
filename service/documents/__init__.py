"""Writing already-split documents into a collection (the synchronous upsert path)."""

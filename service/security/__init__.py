"""Security helpers shared by the API and the indexer (allowlists, safe fetching)."""

"""Security helpers shared by the API and the indexer: allowlists and SSRF-safe fetching."""

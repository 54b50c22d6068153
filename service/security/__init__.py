"""Safe SSRF-proof fetching of caller-supplied URLs, shared by the API and the indexer."""

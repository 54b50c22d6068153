"""Wire models: what crosses HTTP, kept apart from the domain types."""

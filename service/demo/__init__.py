"""The offline demo: runners, API and a small sample collection, in one command."""

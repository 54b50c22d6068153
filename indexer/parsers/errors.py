"""The parsers' one error, in a module of its own so each parser imports it from below, not from the package
that imports the parsers."""

from __future__ import annotations


class ParseError(Exception):
    """The file cannot be read as any supported format (reported per file; the job goes on)."""

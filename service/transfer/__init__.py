"""Moving a collection between stores without embedding anything again: a portable export file.

``format`` writes and reads the file (one gzip-compressed JSON Lines stream), ``exporter`` streams a
collection into it, ``importer`` streams it back into a collection (created with the file's settings, or an
empty one that matches), ``errors`` names every refusal. docs/export-import.md describes the file for people.
"""

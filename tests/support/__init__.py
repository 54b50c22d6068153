"""Test support: tiny checkpoints, runner fixtures, in-process app helpers."""

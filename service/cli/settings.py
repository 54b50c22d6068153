"""Settings from a command's options: the ones serve, runners, demo and the offline commands share."""

from __future__ import annotations

import argparse
from pathlib import Path

from service.config import Settings


def settings_of(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in {
        "profile": getattr(args, "profile", None), "host": getattr(args, "host", None),
        "port": getattr(args, "port", None), "data_dir": getattr(args, "data_dir", None),
        "workers": getattr(args, "workers", None),
    }.items() if v is not None}
    return Settings(**overrides)


def add_settings_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", choices=["qwen3", "qwen3-large", "minilm"], default=None)
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)

"""ragserve-client's build backend: setuptools' own, run on a temporary copy of service/client.

setuptools builds in the source folder. ``pip install ./service/client`` left ``build/`` and an egg-info in the
checkout, and a module deleted or renamed after one build stayed in ``build/lib``, from where the next wheel
shipped it. Each hook here copies the client's files (without such leftovers) into a temporary folder and runs
setuptools' hook there, so every way of building (pip install, pip wheel, python -m build) writes nothing into
the checkout and packs only what is in it. There is no editable install: it would point into the copy.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from setuptools import build_meta

LEFTOVERS = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
Settings = dict[str, Any] | None


@contextmanager
def _in_a_copy() -> Iterator[None]:
    """Run the block in a fresh copy of the source folder (the frontend's working directory)."""
    source = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="ragserve-client-build-") as tmp:
        copy = Path(tmp) / "client"
        shutil.copytree(source, copy, ignore=LEFTOVERS)
        os.chdir(copy)
        try:
            yield
        finally:
            os.chdir(source)


def get_requires_for_build_wheel(config_settings: Settings = None) -> list[str]:
    with _in_a_copy():
        return build_meta.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings: Settings = None) -> list[str]:
    with _in_a_copy():
        return build_meta.get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Settings = None) -> str:
    target = os.path.abspath(metadata_directory)
    with _in_a_copy():
        return build_meta.prepare_metadata_for_build_wheel(target, config_settings)


def build_wheel(wheel_directory: str, config_settings: Settings = None,
                metadata_directory: str | None = None) -> str:
    target = os.path.abspath(wheel_directory)
    metadata = os.path.abspath(metadata_directory) if metadata_directory else None
    with _in_a_copy():
        return build_meta.build_wheel(target, config_settings, metadata)


def build_sdist(sdist_directory: str, config_settings: Settings = None) -> str:
    target = os.path.abspath(sdist_directory)
    with _in_a_copy():
        return build_meta.build_sdist(target, config_settings)

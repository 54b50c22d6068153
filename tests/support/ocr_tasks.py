"""Calls for the OCR worker pool's tests, run inside a worker (module-level, so a worker imports them by name)."""

from __future__ import annotations

import os
import signal
import threading


def pid() -> int:
    return os.getpid()


def hang() -> None:
    """A page that never ends (an engine stuck in a loop)."""
    threading.Event().wait()


def allocate(megabytes: int) -> int:
    """A page that needs ``megabytes`` of memory at once (a decompression bomb's pixels)."""
    return len(bytearray(megabytes * 1024 * 1024))


def die() -> None:
    """A renderer that crashes (a segfault in native code)."""
    os.kill(os.getpid(), signal.SIGKILL)


def fail() -> None:
    raise ValueError("a corrupt page")

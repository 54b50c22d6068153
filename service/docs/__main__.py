"""``python -m service.docs [--check]``: every generated reference at once."""

from __future__ import annotations

import sys

from service.docs import api_reference, configuration

if __name__ == "__main__":
    sys.exit(max(api_reference.main(), configuration.main()))

"""``python -m service.cli``: the ``ragserve`` command."""

from service.cli import main

main()

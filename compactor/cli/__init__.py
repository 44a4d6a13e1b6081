"""The ``compactor`` command line: :mod:`compactor.cli.main` and one module per verb."""

from compactor.cli.main import build_parser, entry, main

__all__ = ["build_parser", "entry", "main"]

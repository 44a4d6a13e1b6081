"""The ``compactor`` command line: :mod:`compactor.cli.main` and one module per verb."""

import os

from compactor.ops.arrow_pool import pick_arrow_pool

pick_arrow_pool(os.environ)  # before the verbs' modules load pyarrow (see arrow_pool)

from compactor.cli.main import build_parser, entry, main  # noqa: E402

__all__ = ["build_parser", "entry", "main"]

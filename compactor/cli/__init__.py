"""The ``compactor`` command line: :mod:`compactor.cli.main` and one module per verb.

This package's own import stays light, so that the console script holds stop signals
(:mod:`compactor.cli.early_stop`) before the verbs' modules load.
"""

import os

from compactor.cli import early_stop
from compactor.ops.arrow_pool import pick_arrow_pool

pick_arrow_pool(os.environ)  # before the verbs' modules load pyarrow (see arrow_pool)

__all__ = ["entry"]


def entry() -> None:
    """The ``compactor`` console script: hold stop signals, then load the verbs and run one."""
    early_stop.hold()
    from compactor.cli.main import console

    console()


"""``python -m compactor.cli``: the same as the ``compactor`` command."""

from compactor.cli import entry

entry()

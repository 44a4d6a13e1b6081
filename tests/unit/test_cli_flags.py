"""The command line's global flags: --version, and --log-level before or after the verb."""

from __future__ import annotations

import pytest

from compactor.cli.main import build_parser


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("compactor ")


@pytest.mark.parametrize(("argv", "level"), [
    (["run", "--config", "c"], "INFO"),
    (["--log-level", "DEBUG", "run", "--config", "c"], "DEBUG"),
    (["run", "--config", "c", "--log-level", "WARNING"], "WARNING"),
    (["--log-level", "DEBUG", "status", "--config", "c", "--log-level", "ERROR"], "ERROR"),
])
def test_log_level_before_or_after_the_verb(argv, level) -> None:
    assert build_parser().parse_args(argv).log_level == level

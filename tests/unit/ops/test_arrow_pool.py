"""The command line names Arrow's pool for its own process unless the environment does."""

from __future__ import annotations

import pyarrow as pa

from compactor.ops.arrow_pool import ARROW_POOL_ENV, default_arrow_pool, pick_arrow_pool
from streaming.session import ARROW_POOL, DEFAULTS


def test_the_command_line_names_the_pool_the_session_defaults_to() -> None:
    environ: dict[str, str] = {}
    assert pick_arrow_pool(environ) == DEFAULTS[ARROW_POOL]
    assert environ == {ARROW_POOL_ENV: DEFAULTS[ARROW_POOL]}


def test_a_pool_the_environment_names_stays() -> None:
    environ = {ARROW_POOL_ENV: "system"}
    assert pick_arrow_pool(environ) == "system"
    assert environ == {ARROW_POOL_ENV: "system"}


def test_the_default_is_a_pool_this_pyarrow_has() -> None:
    pool = {"jemalloc": pa.jemalloc_memory_pool, "system": pa.system_memory_pool}
    assert pool[default_arrow_pool()]().backend_name == default_arrow_pool()

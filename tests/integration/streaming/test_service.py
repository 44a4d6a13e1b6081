"""The service's own upkeep while it mirrors."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from compactor.lake.layout import topic_paths
from compactor.ops.native_heap import NativeHeapTrimmer
from streaming.service import Service
from tests.conftest import wait_until
from tests.integration.helpers import log_table, running


@pytest.mark.usefixtures("spark")
def test_a_running_service_gives_the_drivers_freed_native_memory_back(
        broker, topic_factory, lake_config) -> None:
    """A mirror runs for months, and glibc keeps what the driver's threads free: the service's
    loop trims the C heap on its interval while the query runs (10 s by default; 0 here)."""
    if not NativeHeapTrimmer().available:
        pytest.skip("the C library has no malloc_trim: nothing to give back")
    topic = topic_factory(1)
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", 0) for i in range(5)])
    config = lake_config(topic, trigger_interval_ms="200")
    service = Service(config)
    service.native_heap = NativeHeapTrimmer(interval_s=0.0)
    with running(service) as failures:
        log_path = topic_paths(config.lake_path, topic).log
        wait_until(lambda: failures or (DeltaTable.is_deltatable(log_path)
                                        and log_table(config, topic).num_rows == 5),
                   120, "the mirror")
        trims = service.native_heap.trims
        wait_until(lambda: failures or service.native_heap.trims >= trims + 3, 60, "trims")
    assert not failures, failures
    assert service.native_heap.trims >= trims + 3

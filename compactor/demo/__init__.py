"""``compactor demo`` and its fixtures: an embedded broker and Schema Registry, a workload of
user profiles, and the picture of a run. Only the ``demo`` extra needs them."""

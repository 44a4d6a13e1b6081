"""The fault hunt's parts: the producer it checks against, the lake's probes, the check."""

"""Chaos scenarios: the real gateway process under crashes, duplicates and faults."""

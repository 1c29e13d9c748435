"""Kairos operator interface: the CLI, settings, clocks and the local stack launcher."""

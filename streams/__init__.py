"""The Kairos worker: the host stage over host-keyed topics, the dispatcher and the projector."""

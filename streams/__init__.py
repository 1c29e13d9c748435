"""The Kairos worker: Faust agents over host-keyed topics, the dispatcher and the projector."""

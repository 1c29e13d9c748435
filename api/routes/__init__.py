"""HTTP routes, one router per resource."""

PREFIX = "/api/compliance/scheduler"

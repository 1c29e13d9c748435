"""The shared floor: what the worker, the projector, the API and the CLI all stand on.

Settings, the injected clock, the database and its migrations, recurrence and cron
arithmetic, metrics plumbing. Nothing here imports a room (`streams`, `api`) or the front
door (`kairos.cli` and its siblings); `lint-imports` holds that.
"""

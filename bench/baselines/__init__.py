"""Baselines the bench compares Kairos with, run as separate processes on the same machine.

Each emits ScanCommand-shaped JSON on its own scan-commands topic, so the same collector
reads lateness from the same fields (`issued_at - due_at`). The product never imports them.
"""

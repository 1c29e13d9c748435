"""Kairos benchmark suite: `python -m bench SCENARIO [--scale N] [--quick]`.

Everything here measures what the running system did (timestamps on the messages it
emitted, counts over time, process RSS); nothing is computed from a formula. The product
never imports this package.
"""

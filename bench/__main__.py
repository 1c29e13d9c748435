import sys

from bench.scenarios import SCENARIOS

# Micro-benchmarks need neither the bench extra nor a broker: run them before loading the CLI.
_MICRO = {name: s for s in SCENARIOS if not s.needs_stack for name in (s.key, str(s.number))}
if len(sys.argv) > 1 and sys.argv[1] in _MICRO:
    raise SystemExit(_MICRO[sys.argv[1]].micro()(sys.argv[2:]))

from bench.cli import main  # noqa: E402

raise SystemExit(main())

"""``python -m wildtrace``: the Hydra app."""

from wildtrace.app import main

main()

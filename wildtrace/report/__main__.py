"""``python -m wildtrace.report``."""

from wildtrace.report.app import main

main()

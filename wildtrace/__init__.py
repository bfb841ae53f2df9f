"""wildtrace: a harness that reproduces the WildTrace long-context benchmark end to end.

Layout (pure core in the middle, I/O at the edges):
    core/       spec logic as pure functions: caps, prompts, judge parsing, views
    offline/    the deterministic offline baseline model and lexical judge (pure)
    providers/  wire formats only: build a request body, parse a response body
    runtime/    I/O: dataset files, HTTP with retry/timeout/concurrency, cache, the run
    tracking/   MLflow, in one place
    config.py   structured-config schemas; app.py the thin Hydra entry point
"""

__version__ = "0.1.0"

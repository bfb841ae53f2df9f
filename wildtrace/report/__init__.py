"""Reading runs back: the leaderboard, judge agreement, rerun spread and comparisons.

``stats`` (pure statistics) and ``tables`` (pure tables over runs) do the work;
``sources`` reads MLflow or run directories, ``render`` writes the files and the page,
``publish`` logs the report to MLflow, ``app`` is the Hydra entry point.
"""

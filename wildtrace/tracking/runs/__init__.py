"""MLflow runs: events to a run as it goes (observer), a run folder to a run (mlflow_logger), a sweep's
parent (parent, sweep)."""

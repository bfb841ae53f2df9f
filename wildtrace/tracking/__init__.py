"""MLflow, in one place. Imported lazily: a run without MLflow never pays its import."""

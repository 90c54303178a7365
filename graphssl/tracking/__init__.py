"""MLflow tracking: the store, runs, sweep parents, stale runs. The only layer importing MLflow."""

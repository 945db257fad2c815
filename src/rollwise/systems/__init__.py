"""Step-time model: what a run's recorded work costs in seconds on a named cluster (Bench 4.0)."""

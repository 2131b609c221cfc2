"""Running a grid: the plan, work units, executors (local, batched, Ray), run identity and the results store."""

"""Cost model: measured step times, c_rel, v(k), and the docs/metrics.md speed-up model."""

"""Cost model: measured step times, c_rel, v(k), and the SPEC §3 speed-up model."""

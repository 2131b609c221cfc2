"""The speculative loop, drafters, acceptance step, events and metrics."""

"""Capability and speed, scored together: tasks, the resumable runner, results, reports and plots."""

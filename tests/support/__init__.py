"""Helpers that test modules import: fakes, synthetic files, servers, shared bounds. Fixtures live in conftest.py."""

"""Mutation testing of the core modules (`python -m mutation.run`, `make mutate`); not part of the test suite."""

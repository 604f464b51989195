"""Mutation testing of the core modules (`python -m experiments.mutation.run`, `make mutate`); not part of the
test suite."""

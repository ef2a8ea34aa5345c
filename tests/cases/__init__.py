"""Graphs and inputs that unit tests and the Envoy validation tests (tests/e2e) share."""

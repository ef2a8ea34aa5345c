"""Kubernetes mode: the API server as a source of objects, and the sink of their status."""

"""Queries, one module per resource. Each function takes a request context."""

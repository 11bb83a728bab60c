"""Clients of the other services: one module per service."""

"""GPU drivers."""

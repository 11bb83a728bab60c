"""Accelerators on this host: the drivers that find and prepare them."""

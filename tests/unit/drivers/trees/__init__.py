"""Recorded hosts for the driver tests, written out as sysfs trees."""

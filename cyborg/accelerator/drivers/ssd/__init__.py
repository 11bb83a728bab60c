"""NVMe SSD drivers."""

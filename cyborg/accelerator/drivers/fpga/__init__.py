"""FPGA drivers."""

"""AI chip (NPU) drivers."""

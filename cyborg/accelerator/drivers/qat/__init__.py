"""QuickAssist (crypto and compression) drivers."""

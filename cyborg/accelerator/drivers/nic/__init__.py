"""Network card drivers (SR-IOV virtual functions)."""

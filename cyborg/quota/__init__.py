"""Per-project limits on accelerator requests (Keystone unified limits).

``resources`` names what is limited, ``limits`` reads the limits through
oslo.limit, ``enforcement`` compares a creation against them.
"""

"""The conductor: the only writer of inventory, ARQ state and Placement."""

"""Plain domain objects, and the payload that agents report to conductors."""

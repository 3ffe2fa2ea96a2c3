"""gpuslo: explains why a GPU fleet broke its SLO."""

__version__ = "0.1.0"

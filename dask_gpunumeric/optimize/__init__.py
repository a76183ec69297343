"""Passes over the expression DAG before Dask schedules anything (``pipeline.PASSES``), and the DAG tools
they share (``dag``)."""
from .pipeline import PASSES, Pass, explain_groups, optimize, settings_key

__all__ = ["PASSES", "Pass", "explain_groups", "optimize", "settings_key"]

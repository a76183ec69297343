"""Passes over the expression DAG before Dask schedules anything: fusion, stencils, simplifications."""

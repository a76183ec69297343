"""Accelerated regions as per-worker programs, and how their ranks exchange values."""

"""Other libraries holding gnp Arrays: xarray."""

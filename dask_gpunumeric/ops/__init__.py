"""One registry per kind of operation: elementwise functions (ufuncs) and reductions."""

"""Typed programs of fused groups and stencil sweeps, and the CUDA C++ source generated from them."""

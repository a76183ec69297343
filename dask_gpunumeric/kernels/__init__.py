"""One block's work: NumPy and CuPy block functions, the Philox generator, the compile and launch path."""

"""Running graphs: compile and cache, the local scheduler, fetch, faults, clusters and per-worker regions."""

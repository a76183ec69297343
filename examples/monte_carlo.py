"""Monte-Carlo estimate of the integral of exp(-x**2) over [-10, 10], which is sqrt(pi) ~ 1.7725.

    python examples/monte_carlo.py [--n N]

n defaults to 2**30 samples on CuPy blocks (a GPU) and 2**24 on NumPy blocks. The whole
computation is one lazy expression; ``gnp.fetch`` runs it and brings back a Python float.
"""

import argparse
import time

# --8<-- [start:example]
import dask_gpunumeric as gnp


def integrand(x):
    return gnp.exp(-x ** 2)


def monte_carlo(n, x_max):
    omega = 2 * x_max
    raw = gnp.random.default_rng(42).random(n, dtype=gnp.float32)
    samples = omega * raw - x_max
    return (omega / n) * gnp.sum(integrand(samples))
# --8<-- [end:example]


def main(argv=None):
    backend = gnp.config.backend()
    default_n = 2**30 if backend == "cupy" else 2**24
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n",
        type=int,
        default=default_n,
        help=f"number of samples (default here: 2**{default_n.bit_length() - 1}, backend {backend})",
    )
    args = parser.parse_args(argv)

    start = time.perf_counter()
    estimate = gnp.fetch(monte_carlo(args.n, 10.0))
    elapsed = time.perf_counter() - start

    print(f"estimate: {estimate:.6f}  (sqrt(pi) = 1.772454)")
    print(f"n:        {args.n}")
    print(f"backend:  {backend}")
    print(f"elapsed:  {elapsed:.3f} s")


if __name__ == "__main__":
    main()

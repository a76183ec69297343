#!/usr/bin/env bash
# The main-job command (README): on a fresh machine, sets up .venv, adds CuPy when nvidia-smi lists
# a GPU, and runs the Monte-Carlo example (on the GPU if there is one, else on the CPU).
#
#   bash ci/example.sh [--n N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=ci/setup_venv.sh
source ci/setup_venv.sh
gnp_setup_venv

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "ci: GPU found ($(nvidia-smi -L | head -n 1)): pip install cupy-cuda13x"
    pip install -q -c ci/constraints.txt 'cupy-cuda13x>=14.0.1,!=14.1.0'
else
    echo "ci: no GPU found: running on NumPy blocks"
fi

python examples/monte_carlo.py "$@"

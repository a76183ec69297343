# shellcheck shell=bash
# Shared by ci/test.sh, ci/docs.sh and ci/example.sh (sourced, not run): defines gnp_setup_venv.
#
#   source ci/setup_venv.sh
#   gnp_setup_venv [EXTRAS]      # e.g. gnp_setup_venv test,bench
#
# Creates .venv in the repository root with `python3 -m venv` if it is missing (set PYTHON to use
# another interpreter, >= 3.11), activates it, and installs this package editable with the given
# extras, pinned by ci/constraints.txt (the lowest dask and distributed admitted), or by the file that
# GNP_CONSTRAINTS names (ci/constraints-newest.txt: the highest); with GNP_VENV_READY set (.ci/run, after it
# installed every extra in one step), only activates it. Leaves the current directory at the repository root.

GNP_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

gnp_setup_venv() {
    local extras="${1:-}" python="${PYTHON:-python3}" spec="." constraints="${GNP_CONSTRAINTS:-ci/constraints.txt}"
    cd "$GNP_REPO_ROOT" || return
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    if [[ ! -x .venv/bin/python ]]; then
        if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            echo "ci: $python is $("$python" -V 2>&1); dask_gpunumeric needs Python >= 3.11 (set PYTHON=...)" >&2
            return 1
        fi
        echo "ci: creating .venv with $("$python" -V 2>&1)"
        "$python" -m venv .venv || return
    fi
    # shellcheck disable=SC1091
    source .venv/bin/activate || return
    [[ -n "${GNP_VENV_READY:-}" ]] && return 0
    [[ -n "$extras" ]] && spec=".[$extras]"
    echo "ci: pip install -c $constraints -e \"$spec\""
    pip install -q -c "$constraints" -e "$spec" || return
}

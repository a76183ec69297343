#!/usr/bin/env bash
# Build the documentation site (docs/ and the docstrings, mkdocs.yml) with warnings as errors: sets up
# .venv with the docs extra, then runs `mkdocs build --strict` into SITE_DIR (default: a
# temporary folder, removed afterwards).
#
#   bash ci/docs.sh [SITE_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=ci/setup_venv.sh
source ci/setup_venv.sh
gnp_setup_venv docs

site="${1:-}"
if [[ -z "$site" ]]; then
    site="$(mktemp -d "${TMPDIR:-/tmp}/gnp-site.XXXXXX")"
    # shellcheck disable=SC2064  # expand now: the folder to remove
    trap "rm -rf '$site'" EXIT
fi
export NO_MKDOCS_2_WARNING=1  # mkdocs-material's notice about MkDocs 2, printed on every build
echo "ci: mkdocs build --strict --site-dir $site"
mkdocs build --strict --site-dir "$site"

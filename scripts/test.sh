#!/usr/bin/env bash
# The whole test suite: installs the pinned npm packages the conformance tests validate against
# (once; later runs are offline), runs every Rust test in the workspace (black-box tests on the
# embedded SQLite store), then the black-box suite again on Postgres (a fresh database per
# server on the machine's Postgres at 127.0.0.1:5432).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/conformance/install.sh
cargo test --workspace "$@"
THREADSTREAM_TEST_STORE=postgres cargo test -p threadstream --tests "$@"

#!/usr/bin/env bash
# The whole test suite: installs the pinned npm packages the conformance tests validate against
# (once; later runs are offline), then runs every Rust test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/conformance/install.sh
cargo test --workspace "$@"

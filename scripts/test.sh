#!/usr/bin/env bash
# The whole test suite: installs the pinned npm packages the conformance tests validate against
# (once; later runs are offline), runs every Rust test in the workspace (black-box tests on the
# embedded SQLite store), then the black-box suite again on Postgres (a fresh database per
# server on the machine's Postgres at 127.0.0.1:5432), and once more with every connection served
# by hyper alone (`--http1-engine hyper`, the operators' fallback).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/conformance/install.sh
# Every SQLite store a black-box test leaves behind is checked by `threadstream verify`
# (tests/blackbox/common/mod.rs, on drop); reports of unclean stores land here and fail the run.
export THREADSTREAM_VERIFY_STORES="$PWD/target/verify-reports"
rm -rf "$THREADSTREAM_VERIFY_STORES"
# The browser test bounds how smoothly the page scrolls (frame p95 ≤ 100 ms, tests/browser/ui.mjs):
# a measure of the page, so it runs alone after each pass, not beside the suite's other tests
# competing for the same two cores (it measured 87 ms among them, 55 alone, on this machine).
BROWSER=browser::the_page_in_headless_chromium
cargo test --workspace "$@" -- --skip "$BROWSER"
cargo test --workspace --test blackbox "$@" -- --exact "$BROWSER"
# `--workspace --test blackbox` (not `-p threadstream`) keeps the first run's feature set, so
# nothing is rebuilt.
for pass in THREADSTREAM_TEST_STORE=postgres THREADSTREAM_TEST_HTTP1_ENGINE=hyper; do
  env "$pass" cargo test --workspace --test blackbox "$@" -- --skip "$BROWSER"
  env "$pass" cargo test --workspace --test blackbox "$@" -- --exact "$BROWSER"
done
if compgen -G "$THREADSTREAM_VERIFY_STORES/*" >/dev/null; then
  echo "threadstream verify found problems in stores left by tests:" >&2
  cat "$THREADSTREAM_VERIFY_STORES"/* >&2
  exit 1
fi
echo "verify: every store left by the tests is clean"

#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for a bounded time each:
#   bash scripts/fuzz.sh [--secs N] [target ...]
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). libFuzzer needs nightly flags: the
# machine's stable toolchain accepts them with RUSTC_BOOTSTRAP=1. The harnesses are safe Rust,
# so no sanitizer is compiled in (`-s none`, much faster); debug assertions are on, so integer
# overflow panics. A crash leaves its input in fuzz/libfuzzer/artifacts/<target>/: fix the
# cause, then copy the input to fuzz/regressions/<target>/ so the test suite replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=60
if [[ "${1:-}" == "--secs" ]]; then secs=$2; shift 2; fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then targets=(cursor ingest openai_stream anthropic_stream http1_codec); fi
export RUSTC_BOOTSTRAP=1
for t in "${targets[@]}"; do
  corpus="target/fuzz-corpus/$t"
  mkdir -p "$corpus"
  cp -n fuzz/regressions/"$t"/* "$corpus"/ 2>/dev/null || true
  echo "== $t: ${secs}s"
  cargo fuzz run --fuzz-dir fuzz/libfuzzer -s none --debug-assertions "$t" "$corpus" -- \
    -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10
done

//! A bounded fuzz run inside the ordinary test suite: every harness gets a few seconds of inputs
//! mutated from its kept ones (bytes flipped, inserted, deleted, duplicated, and spliced with
//! another kept input). It is not coverage-guided — `scripts/fuzz.sh` runs libFuzzer for that,
//! whose release build with instrumentation takes longer than the whole suite — but it runs on
//! every test command, so a harness that panics on a near neighbour of a known input is caught
//! at once. A failing input is written to `target/fuzz-failures/<target>-<seed>` with the seed
//! that made it; `FUZZ_SEED=<n>` repeats a run and `FUZZ_SECS=<n>` changes its length.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How long each target is run: five targets, about 20 s in all.
const DEFAULT_SECS_PER_TARGET: u64 = 4;

fn kept_inputs(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("regressions")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

/// One mutation of `input` (never longer than 64 KB, so a run stays cheap).
fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    const INTERESTING: &[&[u8]] = &[
        b"\r\n",
        b"\n",
        b"\r",
        b" ",
        b"\t",
        b":",
        b"\"",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b"0",
        b"-1",
        b"\x00",
        b"\xff",
        b"chunked",
        b"Content-Length: ",
        b"Transfer-Encoding: ",
        b"data: ",
        b"\n\n",
        b"9223372036854775808",
    ];
    match rng.gen_range(0..6) {
        0 if !input.is_empty() => {
            let i = rng.gen_range(0..input.len());
            input[i] ^= 1 << rng.gen_range(0..8);
        }
        1 => {
            let i = rng.gen_range(0..=input.len());
            let token = INTERESTING[rng.gen_range(0..INTERESTING.len())];
            input.splice(i..i, token.iter().copied());
        }
        2 if !input.is_empty() => {
            let start = rng.gen_range(0..input.len());
            let end = (start + rng.gen_range(1..=16)).min(input.len());
            input.drain(start..end);
        }
        3 if !input.is_empty() => {
            let start = rng.gen_range(0..input.len());
            let end = (start + rng.gen_range(1..=32)).min(input.len());
            let piece = input[start..end].to_vec();
            let at = rng.gen_range(0..=input.len());
            input.splice(at..at, piece);
        }
        4 => {
            let other = &corpus[rng.gen_range(0..corpus.len())];
            let cut = rng.gen_range(0..=input.len());
            let from = rng.gen_range(0..=other.len());
            input.truncate(cut);
            input.extend_from_slice(&other[from..]);
        }
        _ => {
            let i = rng.gen_range(0..=input.len());
            input.insert(i, rng.gen());
        }
    }
    input.truncate(64 * 1024);
}

#[test]
fn every_harness_survives_a_bounded_mutation_run() {
    let secs = std::env::var("FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SECS_PER_TARGET);
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    // The harnesses' panics are the findings; keep their messages out of the output.
    std::panic::set_hook(Box::new(|_| {}));
    let mut report = Vec::new();
    for (name, target) in threadstream_fuzz::TARGETS {
        let corpus = kept_inputs(name);
        assert!(!corpus.is_empty(), "no kept inputs for {name}");
        let mut rng = StdRng::seed_from_u64(seed);
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut executions = 0u64;
        while Instant::now() < deadline {
            let mut input = corpus[rng.gen_range(0..corpus.len())].clone();
            for _ in 0..rng.gen_range(1..=8) {
                mutate(&mut rng, &mut input, &corpus);
            }
            executions += 1;
            if std::panic::catch_unwind(|| target(&input)).is_err() {
                let _ = std::panic::take_hook();
                let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-failures");
                std::fs::create_dir_all(&dir).unwrap();
                let file = dir.join(format!("{name}-{seed}"));
                std::fs::write(&file, &input).unwrap();
                panic!(
                    "{name} panicked on a mutated input (FUZZ_SEED={seed}), written to {}; \
                     replay it with the harness and keep it under fuzz/regressions/{name}/ once fixed",
                    file.display()
                );
            }
        }
        report.push(format!("{name}: {executions}"));
        assert!(executions > 0, "{name} ran no input");
    }
    let _ = std::panic::take_hook();
    println!(
        "bounded fuzz run, seed {seed}, {secs} s per target; inputs run: {}",
        report.join(", ")
    );
}

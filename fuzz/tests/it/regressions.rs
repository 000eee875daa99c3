//! Replays every kept fuzz input (`fuzz/regressions/<target>/*`: crashers found and fixed, and
//! seeds of each input shape) through its harness: none may panic.

use std::path::Path;

#[test]
fn every_kept_input_passes_its_harness() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let mut replayed = 0;
    for (name, target) in threadstream_fuzz::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no kept inputs for {name}");
        for file in files {
            let data = std::fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name}: {} panics", file.display());
            replayed += 1;
        }
    }
    assert!(replayed >= threadstream_fuzz::TARGETS.len());
}

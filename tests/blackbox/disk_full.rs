//! Disk full, SQLite only (the data dir is the SQLite store; on Postgres the
//! test returns at once): the data dir is moved onto a 4 MiB tmpfs, filled with a filler file,
//! and an ingest must fail 503 with a JSON error, store nothing of the batch, and leave the file
//! sound; once the filler is deleted the same process accepts appends again. Needs root (mount).

use crate::common;

use std::process::Command;

use common::*;
use serde_json::Value;

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "`{cmd}` failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_fail_503_when_the_disk_is_full_and_recover() {
    if store_kind() != StoreKind::Sqlite {
        return;
    }
    bounded(120, async {
        let mut s = Server::start().await;
        s.stop().await;
        let dir = s.data_dir().to_path_buf();
        let d = dir.display();
        let keep = tempfile::tempdir().unwrap();
        let k = keep.path().display();
        sh(&format!("cp -a {d}/. {k}/ && rm -rf {d}/* && mount -t tmpfs -o size=4m tmpfs {d} && cp -a {k}/. {d}/"));
        struct Unmount(String);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg("-l").arg(&self.0).status();
            }
        }
        let _unmount = Unmount(d.to_string());
        s.restart().await;
        s.ingest_ok("df", &[run_start("r", "o")]).await;
        let before = s.count_events().await;
        // Fill the file system (dd stops at ENOSPC).
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!("dd if=/dev/zero of={d}/filler bs=64k 2>/dev/null"))
            .status();
        let big = "z".repeat(100_000);
        let evs: Vec<Value> = (0..8).map(|_| text_delta("r", "o", &big)).collect();
        let r = s.ingest("df", &evs).await;
        assert_eq!(r.status, 503, "append on a full disk: {}\n{}", r.text, s.logs());
        let v: Value = serde_json::from_str(&r.text).expect("JSON error body");
        assert_eq!(v["error"]["code"], "unavailable", "{v}");
        // The body is generic; SQLite's words are in the log under the body's error id.
        crate::error_bodies::assert_generic_5xx(&s, &r, 503, "unavailable", &["disk is full"])
            .await;
        // Nothing of the refused batch is stored; the file is sound.
        assert_eq!(s.count_events().await, before);
        s.store_integrity_check().await;
        // Space returns: the same process accepts appends again.
        sh(&format!("rm {d}/filler"));
        let mut ok = false;
        let mut last = String::new();
        for _ in 0..50 {
            let r = s.ingest("df", &[text_delta("r", "o", "after")]).await;
            if r.status == 200 {
                ok = true;
                break;
            }
            last = format!("{} {}", r.status, r.text);
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(ok, "no recovery after the space returned: {last}\n{}", s.logs());
        assert_eq!(s.count_events().await, before + 1);
        s.stop().await;
    })
    .await;
}

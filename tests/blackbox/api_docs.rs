//! The API reference page at `/api-docs` (issue #22): served from the binary with the pinned,
//! vendored Scalar bundle (`api/web/vendor-scalar.sh`), and checked in Debian's headless
//! Chromium by `tests/browser/api_docs.mjs`: every path of the document is shown, "Test Request"
//! opens the client on `GET /healthz`, its Send button sends the request to this server (the
//! browser sees the server's answer, 200 `{"ok": true}`) and the page shows it, and nothing is
//! loaded from another origin. The screenshots land in
//! `target/browser-screenshots/` (`api-docs.png`, `api-docs-try.png`).

use std::path::{Path, PathBuf};

use crate::common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test(flavor = "multi_thread")]
async fn api_docs_page_and_its_assets_are_served() {
    let s = Server::start().await;
    for (path, ty) in [
        ("/api-docs", "text/html"),
        ("/assets/api-docs.js", "text/javascript"),
        ("/assets/scalar.js", "text/javascript"),
    ] {
        let r = s.client.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers().clone();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(ty),
            "{path}: {h:?}"
        );
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
        assert!(
            !csp.contains("script-src"),
            "{path}: scripts only from this origin: {csp}"
        );
    }
    // The vendored bundle is the pinned one.
    let bundle = std::fs::read(repo().join("api/web/dist/scalar.js")).unwrap();
    let out = std::process::Command::new("sha256sum")
        .arg(repo().join("api/web/dist/scalar.js"))
        .output()
        .unwrap();
    let digest = String::from_utf8_lossy(&out.stdout);
    assert!(
        threadstream_api::http::web::SCALAR.contains(digest.split_whitespace().next().unwrap()),
        "api/web/dist/scalar.js is not the pinned @scalar/api-reference: run api/web/vendor-scalar.sh"
    );
    assert!(bundle.len() > 1_000_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn api_docs_in_headless_chromium() {
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing: install it with `apt-get install -y chromium` \
         (tests/conformance/install.sh does)"
    );
    let dir = repo().join("tests/browser");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run tests/conformance/install.sh"
    );
    let s = Server::start().await;
    let shots = repo().join("target/browser-screenshots");
    let out = bounded(
        150,
        tokio::process::Command::new("node")
            .arg(dir.join("api_docs.mjs"))
            .arg(&s.base)
            .arg(&shots)
            .current_dir(&dir)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "api_docs.mjs failed:\n{stdout}\n{stderr}"
    );
    for step in [
        "every-route-shown",
        "client-opens",
        "request-sent-and-shown",
        "nothing-from-elsewhere",
        "no-errors",
    ] {
        assert!(
            stdout.contains(&format!("STEP {step} ok")),
            "step {step} did not run:\n{stdout}\n{stderr}"
        );
    }
    assert!(shots.join("api-docs.png").is_file());
    assert!(shots.join("api-docs-try.png").is_file());
}

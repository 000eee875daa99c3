//! The OpenAPI document (issue #22): `GET /openapi.json` is the committed `docs/openapi.json`,
//! byte for byte; the pinned validator (PyPI `openapi-spec-validator`, in
//! `tests/conformance/openapi/.venv`) accepts it; and it documents every route and method of the
//! router (`api/src/http/mod.rs`), so a new route cannot be left out.
//!
//! After an intended change of the document: `cargo run -- openapi > docs/openapi.json`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;

fn committed() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json"))
        .expect("docs/openapi.json")
}

pub fn openapi_venv() -> PathBuf {
    conformance_dir().join("openapi/.venv/bin")
}

#[tokio::test]
async fn served_document_is_the_committed_one_and_validates() {
    let s = Server::start().await;
    let resp = s.client.get(s.url("/openapi.json")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "application/json",
        "the document's content type"
    );
    let served = resp.text().await.unwrap();
    assert!(
        served == committed(),
        "GET /openapi.json differs from docs/openapi.json: regenerate it with \
         `cargo run -- openapi > docs/openapi.json` and review the diff"
    );
    let doc: Value = serde_json::from_str(&served).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");

    let validator = openapi_venv().join("openapi-spec-validator");
    assert!(
        validator.is_file(),
        "{} is missing: install it with `bash tests/conformance/install.sh`",
        validator.display()
    );
    let out = tokio::process::Command::new(&validator)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json"))
        .output()
        .await
        .expect("run openapi-spec-validator");
    assert!(
        out.status.success(),
        "openapi-spec-validator refuses docs/openapi.json:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The router and the document are one list (`api/src/http/mod.rs`, `routes`): a route the
/// document names is served (a request to it is not the router's 404 "no such route"), and every
/// operation documents its errors with the one error body.
#[tokio::test]
async fn every_documented_route_is_served_and_documents_its_errors() {
    let s = Server::start().await;
    let doc: Value = serde_json::from_str(&committed()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() > 40, "the document looks unread");
    assert!(paths["/v1/stream/{path}"].get("options").is_some());
    for (path, item) in paths {
        let concrete = path
            .replace("{path}", "p/q")
            .replace("{file}", "missing.js")
            .replace('{', "x")
            .replace('}', "");
        for method in item.as_object().unwrap().keys() {
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let send = s.client.request(m, s.url(&concrete)).send();
            // The router's 404 answers at once; a handler may hold the request (a stream).
            let Ok(resp) = tokio::time::timeout(std::time::Duration::from_secs(5), send).await
            else {
                continue;
            };
            let resp = resp.unwrap();
            if resp.status() == 404 && method != "head" {
                let body = resp.text().await.unwrap();
                assert!(
                    !body.contains("no such route"),
                    "{method} {path} is documented but not routed: {body}"
                );
            }
        }
    }
    // A path the document does not name is the router's 404.
    let resp = s.client.get(s.url("/no/such/route")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.text().await.unwrap().contains("no such route"));
    // Every operation documents its errors with the one error body.
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            let responses = op["responses"].as_object().unwrap();
            for code in ["429", "500", "503"] {
                assert!(
                    responses.contains_key(code),
                    "{method} {path} does not document {code}"
                );
            }
        }
    }
}

/// Checks each event (JSON texts) against the schema `name` of `docs/openapi.json`'s components,
/// with PyPI `jsonschema` (Draft 2020-12) of the pinned venv; panics naming the events that fail.
pub async fn validate_against_document(events_json: &[String], name: &str) {
    let (failed, report) = document_verdicts(events_json, name).await;
    assert!(
        failed.is_empty(),
        "events fail the document's {name}:\n{report}"
    );
}

/// The indexes of the events (JSON texts) the schema `name` of `docs/openapi.json` refuses,
/// with the validator's report.
pub async fn document_verdicts(events_json: &[String], name: &str) -> (BTreeSet<usize>, String) {
    use tokio::io::AsyncWriteExt;
    assert!(!events_json.is_empty(), "no events to check");
    let python = openapi_venv().join("python");
    assert!(
        python.is_file(),
        "{} is missing: install it with `bash tests/conformance/install.sh`",
        python.display()
    );
    let mut ndjson = String::new();
    for e in events_json {
        let v: Value = serde_json::from_str(e).expect("event JSON");
        ndjson.push_str(&v.to_string());
        ndjson.push('\n');
    }
    let mut child = tokio::process::Command::new(&python)
        .arg(conformance_dir().join("openapi/check_events.py"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json"))
        .arg(name)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run check_events.py");
    // Written while the output is read: a long report would otherwise fill its pipe first.
    let mut stdin = child.stdin.take().unwrap();
    let writer = tokio::spawn(async move {
        stdin.write_all(ndjson.as_bytes()).await.unwrap();
    });
    let out = child.wait_with_output().await.unwrap();
    writer.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let report = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // `event N (…) fails …` per refused event; `ok N` when none is.
    let failed: BTreeSet<usize> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("event ")?.split(' ').next()?.parse().ok())
        .collect();
    match out.status.code() {
        Some(0) => assert!(stdout.starts_with("ok "), "{report}"),
        Some(1) => assert!(!failed.is_empty(), "{report}"),
        _ => panic!("check_events.py failed to run:\n{report}"),
    }
    (failed, report)
}

/// The document generates a client: npm `openapi-typescript` (pinned in
/// `tests/conformance/openapi-ts`) writes its types, and the pinned `tsc` type-checks
/// `client.ts` against them; a client that misuses a field is refused, so the check can fail.
#[tokio::test]
async fn a_typescript_client_generated_from_the_document_type_checks() {
    let dir = conformance_dir().join("openapi-ts");
    let bin = dir.join("node_modules/.bin");
    assert!(
        bin.join("openapi-typescript").is_file() && bin.join("tsc").is_file(),
        "{} is missing: install it with `bash tests/conformance/install.sh`",
        bin.display()
    );
    let run = |program: &str, args: Vec<String>| {
        let dir = dir.clone();
        let program = bin.join(program);
        async move {
            tokio::process::Command::new(&program)
                .args(&args)
                .current_dir(&dir)
                .output()
                .await
                .unwrap_or_else(|e| panic!("run {}: {e}", program.display()))
        }
    };
    let out = run(
        "openapi-typescript",
        vec![
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("docs/openapi.json")
                .display()
                .to_string(),
            "-o".into(),
            "generated/schema.d.ts".into(),
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "openapi-typescript failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let types = std::fs::read_to_string(dir.join("generated/schema.d.ts")).unwrap();
    assert!(types.contains("\"/instance-ai/threads\": {") && types.contains("ThreadSummary: {"));

    let out = run("tsc", vec!["-p".into(), "tsconfig.json".into()]).await;
    assert!(
        out.status.success(),
        "tsc refuses client.ts against the generated types:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // `createdAt` is a date-time string: using it as a number must not type-check.
    std::fs::write(
        dir.join("generated/misuse.ts"),
        "import type { components } from \"./schema\";\n\
         declare const t: components[\"schemas\"][\"ThreadSummary\"];\n\
         export const n: number = t.createdAt;\n",
    )
    .unwrap();
    let out = run(
        "tsc",
        vec![
            "--noEmit".into(),
            "--strict".into(),
            "generated/misuse.ts".into(),
        ],
    )
    .await;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && said.contains("TS2322"),
        "tsc accepted a misuse of the generated types:\n{said}"
    );
}

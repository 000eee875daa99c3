//! Attachments and their HMAC-signed URLs against the real binary, on both stores:
//! upload, sign, fetch; tampered, expired, foreign-bucket and foreign-prefix URLs refused;
//! type and size limits; the bytes survive a restart.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// A tiny valid PNG (1×1, transparent).
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

async fn upload(server: &Server, thread: &str, name: &str, ct: &str, bytes: &[u8]) -> Resp {
    server
        .post_raw(
            &format!(
                "/api/v1/agent/attachments?threadId={}&fileName={}",
                enc(thread),
                enc(name)
            ),
            ct,
            bytes.to_vec(),
        )
        .await
}

async fn sign(server: &Server, bucket: &str, path: &str) -> Resp {
    server
        .get(&format!(
            "/api/v1/agent/attachments/signed-url?bucket={}&path={}",
            enc(bucket),
            enc(path)
        ))
        .await
}

/// Replaces the value of query parameter `name` in `url`.
fn with_param(url: &str, name: &str, value: &str) -> String {
    let (base, query) = url.split_once('?').unwrap();
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k == name => format!("{k}={value}"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

fn param(url: &str, name: &str) -> String {
    url.split_once('?')
        .unwrap()
        .1
        .split('&')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn upload_sign_fetch_and_every_refusal() {
    bounded(120, async {
        let mut server = Server::start_with(Opts {
            extra_args: vec!["--max-attachment-bytes".into(), "4096".into()],
            ..Opts::default()
        })
        .await;

        // Upload before the thread's first message (the usual order: attach, then send).
        let r = upload(&server, "t-att", "../../evil name.png", "image/png", PNG).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let att = r.json();
        let path = att["path"].as_str().unwrap().to_string();
        assert!(path.starts_with("agent-inputs/local/att_"), "{path}");
        assert!(path.ends_with("/evil_name.png"), "{path}");
        assert_eq!(att["bucket"], "threadstream");
        assert_eq!(att["size"], PNG.len());
        assert_eq!(att["contentType"], "image/png");
        assert_eq!(att["threadId"], "t-att");
        // sha256 of PNG, computed independently by `sha256sum`.
        let expected_sha = {
            let out = std::process::Command::new("sha256sum")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin.take().unwrap().write_all(PNG)?;
                    c.wait_with_output()
                })
                .unwrap();
            String::from_utf8(out.stdout).unwrap()[..64].to_string()
        };
        assert_eq!(att["sha256"], expected_sha.as_str());

        // Sign and fetch.
        let signed = sign(&server, "threadstream", &path).await.ok_json("sign");
        let url = signed["url"].as_str().unwrap().to_string();
        let expires = signed["expiresAt"].as_u64().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(expires > now && expires <= now + 301, "{expires} vs {now}");
        let bytes = server.client.get(server.url(&url)).send().await.unwrap();
        assert_eq!(bytes.status(), 200);
        assert_eq!(bytes.headers()["content-type"], "image/png");
        assert_eq!(bytes.headers()["x-content-type-options"], "nosniff");
        assert_eq!(bytes.bytes().await.unwrap().as_ref(), PNG);

        // Tampering with any field breaks the signature.
        let sig = param(&url, "signature");
        let flipped = format!(
            "{}{}",
            &sig[..sig.len() - 1],
            if sig.ends_with('0') { '1' } else { '0' }
        );
        for (what, bad) in [
            ("signature", with_param(&url, "signature", &flipped)),
            (
                "expiry",
                with_param(&url, "expires", &(expires + 3600).to_string()),
            ),
            (
                "path",
                with_param(&url, "path", &enc(&path.replace("evil", "evim"))),
            ),
            ("bucket", with_param(&url, "bucket", "other")),
            ("signature", with_param(&url, "signature", "not-hex")),
        ] {
            let (code, _) = server.get(&bad).await.error(403, what);
            assert_eq!(code, "invalid_signature", "{what}");
        }
        // A URL without its signature is a 400 naming the missing parameter.
        let bare = url.split("&signature=").next().unwrap().to_string();
        let (code, msg) = server.get(&bare).await.error(400, "unsigned");
        assert_eq!(code, "invalid_query");
        assert!(msg.contains("signature"), "{msg}");

        // Signing is for the caller's own objects, in this bucket, that exist.
        let (code, _) = sign(&server, "other-bucket", &path)
            .await
            .error(403, "bucket");
        assert_eq!(code, "unknown_bucket");
        for foreign in [
            path.replace("agent-inputs/local/", "agent-inputs/bob/"),
            format!(
                "agent-inputs/local/../bob/{}",
                path.rsplit('/').next().unwrap()
            ),
            "etc/passwd".to_string(),
        ] {
            let (code, _) = sign(&server, "threadstream", &foreign)
                .await
                .error(403, &foreign);
            assert_eq!(code, "path_outside_user_prefix", "{foreign}");
        }
        sign(&server, "threadstream", "agent-inputs/local/att_none/x.png")
            .await
            .error(404, "missing object");

        // Upload limits: type, size, emptiness, a malformed thread id, a missing thread id.
        let (code, _) = upload(&server, "t-att", "x.html", "text/html", b"<script>")
            .await
            .error(422, "html");
        assert_eq!(code, "unsupported_attachment_type");
        let (code, _) = upload(&server, "t-att", "big.bin", "text/plain", &[b'a'; 5000])
            .await
            .error(413, "too large");
        assert_eq!(code, "payload_too_large");
        upload(&server, "t-att", "e.txt", "text/plain", b"")
            .await
            .error(422, "empty");
        upload(&server, &"x".repeat(129), "a.txt", "text/plain", b"x")
            .await
            .error(400, "bad thread id");
        let (code, _) = server
            .post_raw("/api/v1/agent/attachments", "text/plain", b"x".to_vec())
            .await
            .error(400, "no thread id");
        assert_eq!(code, "invalid_query");

        // The stored bytes outlive the process; a URL signed with the configured key too.
        let text = upload(
            &server,
            "t-att",
            "notes.md",
            "text/markdown; charset=utf-8",
            b"# hi",
        )
        .await
        .ok_json("markdown");
        assert_eq!(text["contentType"], "text/markdown");
        server.restart().await;
        let again: Value = sign(&server, "threadstream", text["path"].as_str().unwrap())
            .await
            .ok_json("sign after restart");
        let r = server.get(again["url"].as_str().unwrap()).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.text, "# hi");
    })
    .await
}

#[tokio::test]
async fn signed_urls_expire_and_are_bound_to_the_signing_key() {
    bounded(60, async {
        let server = Server::start_with(Opts {
            extra_args: vec![
                "--signed-url-ttl-secs".into(),
                "2".into(),
                "--attachment-key".into(),
                "test-key-1".into(),
            ],
            ..Opts::default()
        })
        .await;
        let att = upload(&server, "t-exp", "a.txt", "text/plain", b"hello")
            .await
            .ok_json("upload");
        let path = att["path"].as_str().unwrap();
        let url = sign(&server, "threadstream", path).await.ok_json("sign")["url"]
            .as_str()
            .unwrap()
            .to_string();
        let r = server.get(&url).await;
        assert_eq!((r.status, r.text.as_str()), (200, "hello"));

        // The same URL from a server with another key is refused.
        let other = Server::start_with(Opts {
            extra_args: vec!["--attachment-key".into(), "test-key-2".into()],
            ..Opts::default()
        })
        .await;
        let (code, _) = other.get(&url).await.error(403, "other key");
        assert_eq!(code, "invalid_signature");

        tokio::time::sleep(Duration::from_millis(3100)).await;
        let (code, msg) = server.get(&url).await.error(403, "expired");
        assert_eq!(code, "url_expired", "{msg}");
    })
    .await
}

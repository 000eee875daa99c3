#!/usr/bin/env bash
# Vendors the API reference page's renderer: the browser bundle of npm @scalar/api-reference,
# pinned below, into dist/scalar.js (committed, embedded in the binary: nothing is loaded from a
# CDN at run time). The tarball's integrity is checked against the pin; tests/blackbox/api_docs.rs
# checks the committed file against SCALAR_SHA256.
set -euo pipefail
cd "$(dirname "$0")"
version=1.72.1
integrity="sha512-XpEJ0rfc/cXbCrR+iC4kK0o/WwX2dTtGQbT049OlPKAHD6IMIFdTeGz2r+M27P2EDWKyUITRm/NzlP8z2pw/Ow=="
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack "@scalar/api-reference@$version" --silent >/dev/null)
tgz="$tmp/scalar-api-reference-$version.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
[[ "$got" == "$integrity" ]] || { echo "integrity mismatch: $got" >&2; exit 1; }
tar xzf "$tgz" -C "$tmp" package/dist/browser/standalone.js
cp "$tmp/package/dist/browser/standalone.js" dist/scalar.js
sha256sum dist/scalar.js

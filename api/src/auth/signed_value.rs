//! Signed values: the session cookie's value and the stream ticket, both
//! `<base64url(json payload)>.<base64url(HMAC-SHA256 of the first part)>`, signed by the
//! authenticator's [`Signer`].

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::signer::{Rejected, Signer};

/// `k` of a session cookie.
pub(super) const SESSION: &str = "s";
/// `k` of a stream ticket.
pub(super) const TICKET: &str = "t";

/// The payload of a signed value.
#[derive(Serialize, Deserialize)]
pub(super) struct Signed {
    /// [`SESSION`] or [`TICKET`] (one can never pass for the other).
    pub k: String,
    pub sub: String,
    /// `user` or `admin` (ingest tokens get neither).
    pub role: String,
    /// Expiry, epoch ms.
    pub exp: i64,
    /// Session from a token: the token's sha256, so revoking the token ends the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tok: Option<String>,
    /// Ticket: the thread whose stream it opens, and its id (used once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub th: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// The signed value of `payload`.
pub(super) fn seal(signer: &Signer, payload: &Signed) -> String {
    let body = B64.encode(serde_json::to_vec(payload).expect("a payload serializes"));
    let signature = B64.encode(signer.sign(body.as_bytes()));
    format!("{body}.{signature}")
}

/// The payload of `value`, a value of kind `kind` that `signer` signed and that has not expired
/// at `now_ms`. The payload is decoded before its signature is checked only to read its kind
/// and expiry: a value of another kind is refused as unsigned, whatever its age, and nothing
/// else of it is used unless the signature holds.
pub(super) fn open(
    signer: &Signer,
    value: &str,
    kind: &str,
    now_ms: i64,
) -> Result<Signed, Rejected> {
    let (body, signature) = value.split_once('.').ok_or(Rejected::Signature)?;
    let signature = B64.decode(signature).map_err(|_| Rejected::Signature)?;
    let payload: Signed = B64
        .decode(body)
        .ok()
        .and_then(|json| serde_json::from_slice(&json).ok())
        .filter(|p: &Signed| p.k == kind)
        .ok_or(Rejected::Signature)?;
    signer.verify(body.as_bytes(), &signature, payload.exp, now_ms)?;
    Ok(payload)
}

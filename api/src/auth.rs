//! Authentication: turning a request's credentials into a user id and a role. Owns every
//! credential check — the tokens file (reloaded when it changes), JWTs from an identity
//! provider, the signed session cookie and the single-use stream tickets — and the signing key
//! behind the last two. What a user may do with a thread is not decided here but in
//! `crate::http::authorize_thread`; the request-facing side is the `Caller` extractor
//! (`crate::extract`), the one place identity comes from.
//!
//! With no tokens file and no JWT key configured, authentication is off: every request is the
//! local user, and `serve` refuses to listen on anything but loopback.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// Name of the session cookie (`POST /instance-ai/session` sets it).
pub const SESSION_COOKIE: &str = "threadstream_session";
/// How long a stream ticket can be used, unless configured otherwise.
pub const TICKET_TTL: Duration = Duration::from_secs(60);
/// Default lifetime of a session cookie.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Default JWT claim holding the user id.
pub const DEFAULT_JWT_USER_CLAIM: &str = "sub";
/// Used tickets remembered at most (each is forgotten when it expires).
const MAX_USED_TICKETS: usize = 100_000;

/// A secret from the configuration. `Debug` never shows it, so a config printed with `{:?}`
/// leaks nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// How requests are authenticated; `Default` is off (one local user).
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// JSON file of bearer tokens (see `docs/security.md`); re-read when it changes.
    pub tokens_file: Option<PathBuf>,
    /// JWTs from an identity provider.
    pub jwt: Option<JwtConfig>,
    /// Key that signs session cookies and stream tickets. `None`: a random key per process,
    /// so cookies and tickets only work on the instance that issued them and die with it.
    pub session_secret: Option<Secret>,
    /// Lifetime of a session cookie.
    pub session_ttl: Duration,
    /// How long a stream ticket can be used.
    pub ticket_ttl: Duration,
    /// Add `Secure` to the session cookie (serve behind TLS).
    pub cookie_secure: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens_file: None,
            jwt: None,
            session_secret: None,
            session_ttl: DEFAULT_SESSION_TTL,
            ticket_ttl: TICKET_TTL,
            cookie_secure: false,
        }
    }
}

#[derive(Debug, Clone)]
pub enum JwtKey {
    /// HS256 with this shared secret.
    Hs256(Secret),
    /// RS256, verified with the public key in this PEM file.
    Rs256PublicKeyPem(PathBuf),
}

#[derive(Debug, Clone)]
pub struct JwtConfig {
    pub key: JwtKey,
    /// Required `iss`.
    pub issuer: String,
    /// Required `aud` (one of the token's audiences).
    pub audience: String,
    /// The claim holding the user id (default `sub`).
    pub user_claim: String,
    /// A claim holding the role (`admin` or `user`, or a list containing them); without it
    /// every JWT user is a plain user.
    pub role_claim: Option<String>,
}

/// What a caller may do. Ownership is checked per thread on top of this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Acts on their own threads.
    User,
    /// A user who may also list and read every user's threads (audit), never act on them.
    Admin,
    /// May only append events (`POST /instance-ai/threads/:id/events`) to these threads of its
    /// user's, and read nothing.
    Ingest { threads: Arc<BTreeSet<String>> },
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Admin => "admin",
            Role::Ingest { .. } => "ingest",
        }
    }
}

/// How the caller proved who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// Authentication is off.
    Local,
    /// A bearer token of the tokens file, by its sha256 (hex).
    Token {
        sha256: String,
    },
    /// A JWT expiring at this time (epoch s).
    Jwt {
        exp: i64,
    },
    Session,
    Ticket,
}

/// An authenticated identity (the `Caller` extractor turns it into the request's caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user_id: String,
    pub role: Role,
    pub credential: Credential,
}

/// The hex sha256 of a token: what the tokens file stores instead of the token.
pub fn hash_token(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn unauthorized(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::Unauthorized {
        code,
        message: message.into(),
    }
}

// ------------------------------------------------------------------------------------------------
// The tokens file
// ------------------------------------------------------------------------------------------------

/// `{"tokens": [{"sha256": "<hex>", "user": "alice", "role": "user|admin|ingest",
/// "threads": [...]}]}`; `threads` only (and required) for `ingest`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensDoc {
    tokens: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    sha256: String,
    user: String,
    #[serde(default = "default_role")]
    role: String,
    #[serde(default)]
    threads: Option<Vec<String>>,
}

fn default_role() -> String {
    "user".into()
}

/// Parses the tokens file's text into `sha256 → (user, role)`. Errors name the entry, never a
/// hash (the hashes are not secret, but the file is nobody else's business).
fn parse_tokens(text: &str) -> Result<HashMap<String, (String, Role)>, String> {
    let doc: TokensDoc = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut out = HashMap::new();
    for (i, t) in doc.tokens.into_iter().enumerate() {
        let hash = t.sha256.to_ascii_lowercase();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "tokens[{i}].sha256 must be 64 hex digits (threadstream token hash)"
            ));
        }
        if t.user.trim().is_empty() {
            return Err(format!("tokens[{i}].user must not be empty"));
        }
        let role = match (t.role.as_str(), t.threads) {
            ("user", None) => Role::User,
            ("admin", None) => Role::Admin,
            ("ingest", Some(threads)) => Role::Ingest {
                threads: Arc::new(threads.into_iter().collect()),
            },
            ("ingest", None) => {
                return Err(format!("tokens[{i}]: an ingest token needs `threads`"))
            }
            ("user" | "admin", Some(_)) => {
                return Err(format!("tokens[{i}]: only ingest tokens take `threads`"))
            }
            (other, _) => {
                return Err(format!(
                    "tokens[{i}].role must be user, admin or ingest, not {other:?}"
                ))
            }
        };
        if out.insert(hash, (t.user, role)).is_some() {
            return Err(format!("tokens[{i}]: the same token is listed twice"));
        }
    }
    Ok(out)
}

/// What identifies a version of the file: a rewrite, an edit or an atomic rename changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> std::io::Result<FileStamp> {
    let m = std::fs::metadata(path)?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let inode = 0;
    Ok(FileStamp {
        modified: m.modified().ok(),
        len: m.len(),
        inode,
    })
}

type TokenTable = Arc<HashMap<String, (String, Role)>>;

/// The tokens file, re-read whenever its stamp changes (checked on each use: one `stat`), so
/// tokens are added and revoked without a restart. A file that stops parsing keeps the last good
/// table and logs why.
struct TokensFile {
    path: PathBuf,
    loaded: RwLock<(FileStamp, TokenTable)>,
}

impl TokensFile {
    fn open(path: &Path) -> anyhow::Result<Self> {
        let st = stamp(path)
            .map_err(|e| anyhow::anyhow!("cannot read the tokens file {}: {e}", path.display()))?;
        let text = std::fs::read_to_string(path)?;
        let table = parse_tokens(&text)
            .map_err(|e| anyhow::anyhow!("tokens file {}: {e}", path.display()))?;
        Ok(TokensFile {
            path: path.to_path_buf(),
            loaded: RwLock::new((st, Arc::new(table))),
        })
    }

    fn table(&self) -> TokenTable {
        let current = stamp(&self.path).ok();
        {
            let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
            if current.as_ref().is_none_or(|s| *s == loaded.0) {
                return loaded.1.clone();
            }
        }
        let st = current.expect("checked above");
        let mut loaded = self.loaded.write().unwrap_or_else(|e| e.into_inner());
        if st == loaded.0 {
            return loaded.1.clone();
        }
        match std::fs::read_to_string(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_tokens(&t))
        {
            Ok(table) => {
                tracing::info!(path = %self.path.display(), tokens = table.len(), "reloaded the tokens file");
                *loaded = (st, Arc::new(table));
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "the tokens file does not parse; keeping the previous tokens");
                // Do not re-read the same broken version on every request.
                loaded.0 = st;
            }
        }
        loaded.1.clone()
    }
}

// ------------------------------------------------------------------------------------------------
// JWTs
// ------------------------------------------------------------------------------------------------

struct JwtVerifier {
    key: jsonwebtoken::DecodingKey,
    validation: jsonwebtoken::Validation,
    user_claim: String,
    role_claim: Option<String>,
}

impl JwtVerifier {
    fn new(c: &JwtConfig) -> anyhow::Result<Self> {
        use jsonwebtoken::{Algorithm, DecodingKey, Validation};
        let (key, alg) = match &c.key {
            JwtKey::Hs256(secret) => {
                if secret.0.len() < 32 {
                    anyhow::bail!("the JWT HS256 secret must be at least 32 bytes");
                }
                (
                    DecodingKey::from_secret(secret.0.as_bytes()),
                    Algorithm::HS256,
                )
            }
            JwtKey::Rs256PublicKeyPem(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    anyhow::anyhow!("cannot read the JWT public key {}: {e}", path.display())
                })?;
                let key = DecodingKey::from_rsa_pem(&pem).map_err(|e| {
                    anyhow::anyhow!("{} is not an RSA public key PEM: {e}", path.display())
                })?;
                (key, Algorithm::RS256)
            }
        };
        if c.issuer.is_empty() || c.audience.is_empty() {
            anyhow::bail!("JWT authentication needs --jwt-issuer and --jwt-audience");
        }
        // Only the configured algorithm: a token cannot pick a weaker one (or `none`).
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&c.issuer]);
        validation.set_audience(&[&c.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = 30;
        Ok(JwtVerifier {
            key,
            validation,
            user_claim: c.user_claim.clone(),
            role_claim: c.role_claim.clone(),
        })
    }

    fn verify(&self, token: &str) -> Result<Identity, ApiError> {
        use jsonwebtoken::errors::ErrorKind;
        let data =
            jsonwebtoken::decode::<HashMap<String, Value>>(token, &self.key, &self.validation)
                .map_err(|e| {
                    // Say what was wrong with the token, never echo it.
                    let why = match e.kind() {
                        ErrorKind::ExpiredSignature => "it has expired".to_string(),
                        ErrorKind::InvalidIssuer => {
                            "its issuer (iss) is not the configured one".into()
                        }
                        ErrorKind::InvalidAudience => {
                            "its audience (aud) is not the configured one".into()
                        }
                        ErrorKind::InvalidSignature => "its signature does not verify".into(),
                        ErrorKind::InvalidAlgorithm => "it is signed with another algorithm".into(),
                        ErrorKind::MissingRequiredClaim(c) => format!("it has no `{c}` claim"),
                        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".into(),
                        _ => "it is malformed".into(),
                    };
                    unauthorized("invalid_token", format!("the JWT was rejected: {why}"))
                })?;
        let claims = data.claims;
        let user_id = claims
            .get(&self.user_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                unauthorized(
                    "invalid_token",
                    format!(
                        "the JWT has no string `{}` claim to take the user id from",
                        self.user_claim
                    ),
                )
            })?
            .to_string();
        let role = match self.role_claim.as_ref().and_then(|c| claims.get(c)) {
            None => Role::User,
            Some(v) => {
                let names: Vec<&str> = match v {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                if names.contains(&"admin") {
                    Role::Admin
                } else {
                    Role::User
                }
            }
        };
        let exp = claims.get("exp").and_then(Value::as_i64).unwrap_or(0);
        Ok(Identity {
            user_id,
            role,
            credential: Credential::Jwt { exp },
        })
    }
}

// ------------------------------------------------------------------------------------------------
// Signed values: session cookies and stream tickets
// ------------------------------------------------------------------------------------------------

/// The payload of a signed value: `<base64url(json)>.<base64url(hmac-sha256)>`.
#[derive(Serialize, Deserialize)]
struct Signed {
    /// `s`: session cookie, `t`: stream ticket (one can never pass for the other).
    k: String,
    sub: String,
    /// `user` or `admin` (ingest tokens get neither).
    role: String,
    /// Expiry, epoch ms.
    exp: i64,
    /// Session from a token: the token's sha256, so revoking the token ends the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tok: Option<String>,
    /// Ticket: the thread whose stream it opens, and its id (used once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    th: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
}

/// Where the used tickets are remembered: this process's memory, and on Postgres a table that
/// makes "used once" hold across instances.
#[derive(Clone)]
pub enum TicketLedger {
    Memory,
    Postgres(threadstream_store::PgLog),
}

// ------------------------------------------------------------------------------------------------
// The authenticator
// ------------------------------------------------------------------------------------------------

/// Checks credentials. Cheap to clone (one `Arc`); held in `ApiContext`.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<Inner>,
}

struct Inner {
    tokens: Option<TokensFile>,
    jwt: Option<JwtVerifier>,
    key: Vec<u8>,
    session_ttl: Duration,
    ticket_ttl: Duration,
    cookie_secure: bool,
    /// Ticket id → its expiry (epoch ms); expired ones are dropped as new ones come.
    used_tickets: Mutex<HashMap<String, i64>>,
    ledger: RwLock<TicketLedger>,
}

impl Authenticator {
    pub fn new(config: &AuthConfig) -> anyhow::Result<Self> {
        let tokens = config
            .tokens_file
            .as_deref()
            .map(TokensFile::open)
            .transpose()?;
        let jwt = config.jwt.as_ref().map(JwtVerifier::new).transpose()?;
        let key = match &config.session_secret {
            Some(s) if s.0.len() < 32 => {
                anyhow::bail!("the session secret must be at least 32 bytes")
            }
            Some(s) => s.0.as_bytes().to_vec(),
            None => {
                use rand::RngCore;
                let mut k = vec![0u8; 32];
                rand::thread_rng().fill_bytes(&mut k);
                k
            }
        };
        Ok(Authenticator {
            inner: Arc::new(Inner {
                tokens,
                jwt,
                key,
                session_ttl: config.session_ttl,
                ticket_ttl: config.ticket_ttl,
                cookie_secure: config.cookie_secure,
                used_tickets: Mutex::new(HashMap::new()),
                ledger: RwLock::new(TicketLedger::Memory),
            }),
        })
    }

    /// Authentication is on: a tokens file or a JWT key is configured.
    pub fn enabled(&self) -> bool {
        self.inner.tokens.is_some() || self.inner.jwt.is_some()
    }

    /// Where used tickets are remembered (set once the store is open).
    pub fn set_ticket_ledger(&self, ledger: TicketLedger) {
        *self.inner.ledger.write().unwrap_or_else(|e| e.into_inner()) = ledger;
    }

    /// A bearer credential: a token of the tokens file, else a JWT.
    pub fn bearer(&self, token: &str) -> Result<Identity, ApiError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(unauthorized("invalid_token", "the bearer token is empty"));
        }
        if let Some(file) = &self.inner.tokens {
            let sha256 = hash_token(token);
            if let Some((user, role)) = file.table().get(&sha256) {
                return Ok(Identity {
                    user_id: user.clone(),
                    role: role.clone(),
                    credential: Credential::Token { sha256 },
                });
            }
        }
        match &self.inner.jwt {
            // A JWT is three base64url parts.
            Some(jwt) if token.split('.').count() == 3 => jwt.verify(token),
            _ => Err(unauthorized(
                "invalid_token",
                "the bearer token is not known (revoked, mistyped, or never issued)",
            )),
        }
    }

    fn sign(&self, payload: &Signed) -> String {
        let body = B64.encode(serde_json::to_vec(payload).expect("a payload serializes"));
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.inner.key).expect("any key length");
        mac.update(body.as_bytes());
        format!("{body}.{}", B64.encode(mac.finalize().into_bytes()))
    }

    /// The payload of a value this process's key signed, if the signature holds.
    fn open(&self, value: &str) -> Option<Signed> {
        let (body, sig) = value.split_once('.')?;
        let sig = B64.decode(sig).ok()?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.inner.key).ok()?;
        mac.update(body.as_bytes());
        // Constant-time comparison.
        mac.verify_slice(&sig).ok()?;
        serde_json::from_slice(&B64.decode(body).ok()?).ok()
    }

    fn signed_role(role: &str) -> Option<Role> {
        match role {
            "user" => Some(Role::User),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    /// The `Set-Cookie` value of a new session for `who` (an ingest token gets none: it is for
    /// machines, which send their token).
    pub fn session_cookie(&self, who: &Identity) -> Result<String, ApiError> {
        if matches!(who.role, Role::Ingest { .. }) {
            return Err(ApiError::Forbidden {
                code: "ingest_only",
                message: "an ingest-only token cannot open a session".into(),
            });
        }
        let mut exp = now_ms() + self.inner.session_ttl.as_millis() as i64;
        let tok = match &who.credential {
            Credential::Token { sha256 } => Some(sha256.clone()),
            // A session never outlives the JWT it came from.
            Credential::Jwt { exp: jwt_exp } => {
                exp = exp.min(jwt_exp.saturating_mul(1000));
                None
            }
            _ => None,
        };
        let value = self.sign(&Signed {
            k: "s".into(),
            sub: who.user_id.clone(),
            role: who.role.name().into(),
            exp,
            tok,
            th: None,
            id: None,
        });
        let max_age = ((exp - now_ms()) / 1000).max(0);
        Ok(format!(
            "{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{}",
            if self.inner.cookie_secure {
                "; Secure"
            } else {
                ""
            }
        ))
    }

    /// The `Set-Cookie` value that removes the session cookie.
    pub fn clear_cookie(&self) -> String {
        format!(
            "{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
            if self.inner.cookie_secure {
                "; Secure"
            } else {
                ""
            }
        )
    }

    /// The identity of a session cookie's value.
    pub fn session(&self, value: &str) -> Result<Identity, ApiError> {
        let s = self.open(value).filter(|s| s.k == "s").ok_or_else(|| {
            unauthorized(
                "invalid_session",
                "the session cookie is not valid; sign in again",
            )
        })?;
        if s.exp <= now_ms() {
            return Err(unauthorized(
                "session_expired",
                "the session has expired; sign in again",
            ));
        }
        let role = Self::signed_role(&s.role)
            .ok_or_else(|| unauthorized("invalid_session", "the session cookie is not valid"))?;
        if let Some(sha256) = &s.tok {
            // The token it came from must still exist, for the same user and role.
            let still = self
                .inner
                .tokens
                .as_ref()
                .and_then(|f| f.table().get(sha256).cloned());
            if still != Some((s.sub.clone(), role.clone())) {
                return Err(unauthorized(
                    "session_revoked",
                    "the token this session was opened with has been revoked",
                ));
            }
        }
        Ok(Identity {
            user_id: s.sub,
            role,
            credential: Credential::Session,
        })
    }

    /// A ticket that opens `thread_id`'s stream once, within the ticket lifetime: `(ticket,
    /// expires at epoch ms)`.
    pub fn issue_ticket(&self, who: &Identity, thread_id: &str) -> Result<(String, i64), ApiError> {
        if matches!(who.role, Role::Ingest { .. }) {
            return Err(ApiError::Forbidden {
                code: "ingest_only",
                message: "an ingest-only token cannot read streams".into(),
            });
        }
        let exp = now_ms() + self.inner.ticket_ttl.as_millis() as i64;
        let ticket = self.sign(&Signed {
            k: "t".into(),
            sub: who.user_id.clone(),
            role: who.role.name().into(),
            exp,
            tok: None,
            th: Some(thread_id.to_string()),
            id: Some(uuid::Uuid::new_v4().simple().to_string()),
        });
        Ok((ticket, exp))
    }

    /// The identity of a stream ticket for `thread_id`'s stream, using it up.
    pub async fn redeem_ticket(&self, ticket: &str, thread_id: &str) -> Result<Identity, ApiError> {
        let t = self
            .open(ticket)
            .filter(|t| t.k == "t")
            .ok_or_else(|| unauthorized("invalid_ticket", "the stream ticket is not valid"))?;
        let now = now_ms();
        if t.exp <= now {
            return Err(unauthorized(
                "ticket_expired",
                format!(
                    "the stream ticket has expired (they last {} s); ask for a new one",
                    self.inner.ticket_ttl.as_secs()
                ),
            ));
        }
        if t.th.as_deref() != Some(thread_id) {
            return Err(unauthorized(
                "invalid_ticket",
                "the stream ticket was issued for another thread",
            ));
        }
        let role = Self::signed_role(&t.role)
            .ok_or_else(|| unauthorized("invalid_ticket", "the stream ticket is not valid"))?;
        let id = t.id.unwrap_or_default();
        if !self.use_ticket(&id, t.exp, now).await? {
            return Err(unauthorized(
                "ticket_used",
                "the stream ticket was already used; ask for a new one",
            ));
        }
        Ok(Identity {
            user_id: t.sub,
            role,
            credential: Credential::Ticket,
        })
    }

    /// Marks ticket `id` used; `false` when it already was.
    async fn use_ticket(&self, id: &str, exp: i64, now: i64) -> Result<bool, ApiError> {
        {
            let mut used = self
                .inner
                .used_tickets
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if used.len() >= MAX_USED_TICKETS {
                used.retain(|_, e| *e > now);
            }
            if used.len() >= MAX_USED_TICKETS {
                // Fail closed rather than forget a ticket that could then be used again.
                return Err(ApiError::Unavailable(
                    "too many stream tickets in use; retry in a minute".into(),
                ));
            }
            if used.insert(id.to_string(), exp).is_some() {
                return Ok(false);
            }
        }
        let ledger = self
            .inner
            .ledger
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match ledger {
            TicketLedger::Memory => Ok(true),
            TicketLedger::Postgres(pg) => Ok(pg.use_ticket(id, exp, now).await?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Authenticator {
        Authenticator::new(&AuthConfig::default()).unwrap()
    }

    fn user(name: &str) -> Identity {
        Identity {
            user_id: name.into(),
            role: Role::User,
            credential: Credential::Local,
        }
    }

    #[test]
    fn tokens_file_entries_are_checked() {
        let h = hash_token("t");
        let ok = format!(
            r#"{{"tokens":[{{"sha256":"{h}","user":"a"}},{{"sha256":"{}","user":"b","role":"ingest","threads":["x"]}}]}}"#,
            hash_token("u")
        );
        let t = parse_tokens(&ok).unwrap();
        assert_eq!(t[&h], ("a".to_string(), Role::User));
        for (bad, why) in [
            (r#"{"tokens":[{"sha256":"xyz","user":"a"}]}"#, "64 hex"),
            (
                &format!(r#"{{"tokens":[{{"sha256":"{h}","user":"a","role":"root"}}]}}"#),
                "role must be",
            ),
            (
                &format!(r#"{{"tokens":[{{"sha256":"{h}","user":"a","role":"ingest"}}]}}"#),
                "needs `threads`",
            ),
            (
                &format!(r#"{{"tokens":[{{"sha256":"{h}","user":""}}]}}"#),
                "must not be empty",
            ),
        ] {
            let e = parse_tokens(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn signed_values_reject_tampering_and_the_other_kind() {
        let a = auth();
        let cookie = a.session_cookie(&user("alice")).unwrap();
        let value = cookie
            .strip_prefix("threadstream_session=")
            .unwrap()
            .split(';')
            .next()
            .unwrap();
        assert_eq!(a.session(value).unwrap().user_id, "alice");
        // Another key (another process without a shared secret) does not accept it.
        assert!(auth().session(value).is_err());
        // Flip one character of the payload.
        let mut chars: Vec<char> = value.chars().collect();
        chars[3] = if chars[3] == 'A' { 'B' } else { 'A' };
        let forged: String = chars.into_iter().collect();
        assert!(a.session(&forged).is_err());
        // A ticket is not a session.
        let (ticket, _) = a.issue_ticket(&user("alice"), "t1").unwrap();
        assert!(a.session(&ticket).is_err());
    }

    #[tokio::test]
    async fn tickets_are_single_use_and_bound_to_their_thread() {
        let a = auth();
        let (ticket, _) = a.issue_ticket(&user("alice"), "t1").unwrap();
        assert!(a.redeem_ticket(&ticket, "t2").await.is_err());
        assert_eq!(
            a.redeem_ticket(&ticket, "t1").await.unwrap().user_id,
            "alice"
        );
        let e = a.redeem_ticket(&ticket, "t1").await.unwrap_err();
        assert!(e.to_string().contains("already used"), "{e}");
    }
}

//! Authentication: turning a request's credentials into a user id and a role. Owns every
//! credential check — the tokens file (`tokens_file`, reloaded when it changes), JWTs from an
//! identity provider (`jwt`), the signed session cookie (`session`) and the single-use stream
//! tickets (`tickets`) — and the signer behind the last two (`signer`, `signed_value`). What a
//! user may do with a thread is not decided here but in `crate::access`; the request-facing side
//! is the `Caller` extractor (`crate::extract`), the one place identity comes from.
//!
//! With no tokens file and no JWT key configured, authentication is off: every request is the
//! local user, and `serve` refuses to listen on anything but loopback.

mod jwt;
mod session;
mod signed_value;
pub mod signer;
mod tickets;
mod tokens_file;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use threadstream_domain::ErrorCode;

use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use jwt::JwtVerifier;
use signer::Signer;
use tokens_file::TokensFile;

pub use session::{session_cookie_value, SESSION_COOKIE};
pub use tickets::{TicketLedger, TICKET_TTL};

/// Default lifetime of a session cookie.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Default JWT claim holding the user id.
pub const DEFAULT_JWT_USER_CLAIM: &str = "sub";

/// How requests are authenticated; `Default` is off (one local user).
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// JSON file of bearer tokens (see `docs/security.md`); re-read when it changes.
    pub tokens_file: Option<PathBuf>,
    /// JWTs from an identity provider.
    pub jwt: Option<JwtConfig>,
    /// Key that signs session cookies and stream tickets. `None`: a random key per process,
    /// so cookies and tickets only work on the instance that issued them and die with it.
    pub session_secret: Option<SecretString>,
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
    Hs256(SecretString),
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
    hex::encode(Sha256::digest(token.as_bytes()))
}

pub use threadstream_domain::clock::now_ms;

fn unauthorized(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::Unauthorized {
        code,
        message: message.into(),
    }
}

/// Checks credentials. Cheap to clone (one `Arc`); held in `ApiContext`.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<Inner>,
}

struct Inner {
    tokens: Option<TokensFile>,
    jwt: Option<JwtVerifier>,
    /// Signs session cookies and stream tickets.
    signer: Signer,
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
        if let Some(s) = &config.session_secret {
            if s.expose_secret().len() < 32 {
                anyhow::bail!("the session secret must be at least 32 bytes")
            }
        }
        Ok(Authenticator {
            inner: Arc::new(Inner {
                tokens,
                jwt,
                signer: Signer::new(config.session_secret.as_ref()),
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

    /// A bearer credential: a token of the tokens file, else a JWT.
    pub fn bearer(&self, token: &str) -> Result<Identity, ApiError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(unauthorized(
                ErrorCode::InvalidToken,
                "the bearer token is empty",
            ));
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
                ErrorCode::InvalidToken,
                "the bearer token is not known (revoked, mistyped, or never issued)",
            )),
        }
    }

    fn signed_role(role: &str) -> Option<Role> {
        match role {
            "user" => Some(Role::User),
            "admin" => Some(Role::Admin),
            _ => None,
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
    fn secrets_never_show_in_the_config_debug() {
        let secret = "a session secret of at least 32 bytes";
        let config = AuthConfig {
            session_secret: Some(secret.into()),
            jwt: Some(JwtConfig {
                key: JwtKey::Hs256("a jwt secret of at least 32 bytes!".into()),
                issuer: "i".into(),
                audience: "a".into(),
                user_claim: "sub".into(),
                role_claim: None,
            }),
            ..AuthConfig::default()
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains(secret), "{shown}");
        assert!(!shown.contains("a jwt secret"), "{shown}");
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

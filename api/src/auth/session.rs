//! The session cookie: `POST /instance-ai/session` trades a bearer token or JWT for it, so a
//! browser need not keep the token. Its value is a signed value (`super::signed_value`).

use cookie::{Cookie, SameSite};
use threadstream_domain::ErrorCode;

use super::signed_value::{self, Signed, SESSION};
use super::signer::Rejected;
use super::{now_ms, unauthorized, Authenticator, Credential, Identity, Role};
use crate::error::ApiError;

/// Name of the session cookie (`POST /instance-ai/session` sets it).
pub const SESSION_COOKIE: &str = "threadstream_session";

impl Authenticator {
    /// The `Set-Cookie` value of a new session for `who` (an ingest token gets none: it is for
    /// machines, which send their token).
    pub fn session_cookie(&self, who: &Identity) -> Result<String, ApiError> {
        if matches!(who.role, Role::Ingest { .. }) {
            return Err(ApiError::Forbidden {
                code: ErrorCode::IngestOnly,
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
        let value = signed_value::seal(
            &self.inner.signer,
            &Signed {
                k: SESSION.into(),
                sub: who.user_id.clone(),
                role: who.role.name().into(),
                exp,
                tok,
                th: None,
                id: None,
            },
        );
        let max_age = ((exp - now_ms()) / 1000).max(0);
        Ok(self.set_cookie(value, max_age))
    }

    /// The `Set-Cookie` value that removes the session cookie.
    pub fn clear_cookie(&self) -> String {
        self.set_cookie(String::new(), 0)
    }

    /// `threadstream_session=<value>; HttpOnly; SameSite=Strict; Path=/; Max-Age=<s>`, and
    /// `Secure` when configured.
    fn set_cookie(&self, value: String, max_age_secs: i64) -> String {
        Cookie::build((SESSION_COOKIE, value))
            .http_only(true)
            .same_site(SameSite::Strict)
            .path("/")
            .max_age(cookie::time::Duration::seconds(max_age_secs))
            .secure(self.inner.cookie_secure)
            .build()
            .to_string()
    }

    /// The identity of a session cookie's value.
    pub fn session(&self, value: &str) -> Result<Identity, ApiError> {
        let s =
            signed_value::open(&self.inner.signer, value, SESSION, now_ms()).map_err(
                |e| match e {
                    Rejected::Signature => unauthorized(
                        ErrorCode::InvalidSession,
                        "the session cookie is not valid; sign in again",
                    ),
                    Rejected::Expired => unauthorized(
                        ErrorCode::SessionExpired,
                        "the session has expired; sign in again",
                    ),
                },
            )?;
        let role = Self::signed_role(&s.role).ok_or_else(|| {
            unauthorized(ErrorCode::InvalidSession, "the session cookie is not valid")
        })?;
        if let Some(sha256) = &s.tok {
            // The token it came from must still exist, for the same user and role.
            let still = self
                .inner
                .tokens
                .as_ref()
                .and_then(|f| f.table().get(sha256).cloned());
            if still != Some((s.sub.clone(), role.clone())) {
                return Err(unauthorized(
                    ErrorCode::SessionRevoked,
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
}

/// The value of the session cookie among a request's `Cookie` headers' values.
pub fn session_cookie_value<'a>(headers: impl Iterator<Item = &'a str>) -> Option<String> {
    headers
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == SESSION_COOKIE)
        .map(|c| c.value().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthConfig;

    #[test]
    fn set_cookie_names_every_attribute() {
        let plain = Authenticator::new(&AuthConfig::default()).unwrap();
        assert_eq!(
            plain.clear_cookie(),
            "threadstream_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
        );
        let secure = Authenticator::new(&AuthConfig {
            cookie_secure: true,
            ..AuthConfig::default()
        })
        .unwrap();
        assert_eq!(
            secure.clear_cookie(),
            "threadstream_session=; HttpOnly; SameSite=Strict; Secure; Path=/; Max-Age=0"
        );
    }

    #[test]
    fn the_session_cookie_is_found_among_others_in_any_cookie_header() {
        let headers = ["a=1", "b=2; threadstream_session=v.s; c=3"];
        assert_eq!(
            session_cookie_value(headers.into_iter()).as_deref(),
            Some("v.s")
        );
        assert_eq!(session_cookie_value(["a=1; b"].into_iter()), None);
    }
}

//! JWTs from an identity provider: verified with the configured key and algorithm only, with
//! the configured issuer and audience; the user id and role come from configured claims.

use std::collections::HashMap;
use threadstream_domain::ErrorCode;

use secrecy::ExposeSecret;
use serde_json::Value;

use super::{unauthorized, Credential, Identity, JwtConfig, JwtKey, Role};
use crate::error::ApiError;

pub(super) struct JwtVerifier {
    key: jsonwebtoken::DecodingKey,
    validation: jsonwebtoken::Validation,
    user_claim: String,
    role_claim: Option<String>,
}

impl JwtVerifier {
    pub(super) fn new(c: &JwtConfig) -> anyhow::Result<Self> {
        use jsonwebtoken::{Algorithm, DecodingKey, Validation};
        let (key, alg) = match &c.key {
            JwtKey::Hs256(secret) => {
                if secret.expose_secret().len() < 32 {
                    anyhow::bail!("the JWT HS256 secret must be at least 32 bytes");
                }
                (
                    DecodingKey::from_secret(secret.expose_secret().as_bytes()),
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

    pub(super) fn verify(&self, token: &str) -> Result<Identity, ApiError> {
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
                    unauthorized(
                        ErrorCode::InvalidToken,
                        format!("the JWT was rejected: {why}"),
                    )
                })?;
        let claims = data.claims;
        let user_id = claims
            .get(&self.user_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                unauthorized(
                    ErrorCode::InvalidToken,
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

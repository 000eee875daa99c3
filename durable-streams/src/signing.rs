//! The keys of Durable Streams subscriptions: the Ed25519 key that signs webhook deliveries
//! (published at `/v1/stream/__ds/jwks.json`), and the HMAC key of the wake tokens consumers
//! present on callbacks, acks and releases, derived from it.
//!
//! The key is stored in the log's database (`threadstream_store::EventLog::signing_seed`): the
//! first process offers a random one, every process (and every restart) signs with the stored
//! one. So a JWKS a consumer cached stays valid, and a wake token handed out before a restart is
//! still checked after it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use threadstream_store::{EventLog, StoreError};

/// How long a wake token is accepted (the wake's lease fences it sooner).
const TOKEN_TTL_SECS: i64 = 3_600;
/// What the token key is derived for (a key used for one purpose only).
const TOKEN_KEY_LABEL: &[u8] = b"threadstream durable-streams wake token v1";

/// The signing key, its key id, and the token key. Cheap to clone.
#[derive(Clone)]
pub struct Signing {
    key: SigningKey,
    kid: String,
    x: String,
    token_key: [u8; 32],
}

/// What a wake token says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// The subscription.
    pub sub: String,
    pub generation: u64,
    pub exp: i64,
}

/// Why a wake token is refused (401, with the protocol's code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    Invalid,
    Expired,
}

impl TokenError {
    pub fn code(self) -> threadstream_domain::ErrorCode {
        match self {
            TokenError::Invalid => threadstream_domain::ErrorCode::DsTokenInvalid,
            TokenError::Expired => threadstream_domain::ErrorCode::DsTokenExpired,
        }
    }
}

impl Signing {
    /// The key the log's database keeps (stored now, from fresh randomness, if it keeps none).
    pub async fn load(log: &EventLog) -> Result<Self, StoreError> {
        let mut offered = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut offered);
        let stored = log.signing_seed(&hex::encode(offered)).await?;
        let seed: [u8; 32] = hex::decode(&stored)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                StoreError::unavailable(
                    "the stored webhook signing key is not 32 bytes of hex",
                    std::io::Error::other("webhook_signing_key.seed"),
                )
            })?;
        Ok(Self::from_seed(&seed))
    }

    pub fn from_seed(seed: &[u8; 32]) -> Self {
        let key = SigningKey::from_bytes(seed);
        let x = B64URL.encode(key.verifying_key().as_bytes());
        // The RFC 7638 thumbprint of the public key: members in lexicographic order.
        let thumbprint = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
        let kid = format!("ds_{}", B64URL.encode(Sha256::digest(thumbprint)));
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(seed).expect("any key length");
        mac.update(TOKEN_KEY_LABEL);
        Signing {
            key,
            kid,
            x,
            token_key: mac.finalize().into_bytes().into(),
        }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The JWK Set that publishes the public key.
    pub fn jwks(&self) -> Value {
        json!({"keys": [{
            "kty": "OKP",
            "crv": "Ed25519",
            "x": self.x,
            "kid": self.kid,
            "use": "sig",
            "alg": "EdDSA",
        }]})
    }

    /// The `Webhook-Signature` header of `body` sent at `now_secs`:
    /// `t=<secs>,kid=<kid>,ed25519=<base64url of the signature of "<secs>.<body>">`.
    pub fn signature_header(&self, body: &str, now_secs: i64) -> String {
        let signature = self.key.sign(format!("{now_secs}.{body}").as_bytes());
        format!(
            "t={now_secs},kid={},ed25519={}",
            self.kid,
            B64URL.encode(signature.to_bytes())
        )
    }

    /// A wake token for subscription `sub`'s wake `generation`, issued at `now_secs`:
    /// `base64url(claims JSON).base64url(HMAC-SHA256)`.
    pub fn token(&self, sub: &str, generation: u64, now_secs: i64) -> String {
        let claims = TokenClaims {
            sub: sub.to_string(),
            generation,
            exp: now_secs + TOKEN_TTL_SECS,
        };
        let payload = B64URL.encode(serde_json::to_vec(&claims).expect("claims serialize"));
        let tag = B64URL.encode(self.mac(&payload));
        format!("{payload}.{tag}")
    }

    /// The claims of a token this key issued for `sub`, unless expired at `now_secs`.
    pub fn check_token(
        &self,
        token: &str,
        sub: &str,
        now_secs: i64,
    ) -> Result<TokenClaims, TokenError> {
        let (payload, tag) = token.split_once('.').ok_or(TokenError::Invalid)?;
        let tag = B64URL.decode(tag).map_err(|_| TokenError::Invalid)?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.token_key).expect("32 bytes");
        mac.update(payload.as_bytes());
        mac.verify_slice(&tag).map_err(|_| TokenError::Invalid)?;
        let claims: TokenClaims = B64URL
            .decode(payload)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(TokenError::Invalid)?;
        if claims.sub != sub {
            return Err(TokenError::Invalid);
        }
        if now_secs > claims.exp {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }

    fn mac(&self, payload: &str) -> Vec<u8> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.token_key).expect("32 bytes");
        mac.update(payload.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signature, Verifier};

    #[test]
    fn signatures_verify_with_the_published_key_and_tokens_are_bound() {
        let s = Signing::from_seed(&[7; 32]);
        assert!(s.kid().starts_with("ds_"));
        assert_eq!(
            s.kid(),
            Signing::from_seed(&[7; 32]).kid(),
            "one seed, one kid"
        );
        let header = s.signature_header("{\"a\":1}", 1_700_000_000);
        let sig = header.rsplit_once("ed25519=").unwrap().1;
        let sig = Signature::from_slice(&B64URL.decode(sig).unwrap()).unwrap();
        let x = s.jwks()["keys"][0]["x"].as_str().unwrap().to_string();
        let public: [u8; 32] = B64URL.decode(x).unwrap().try_into().unwrap();
        let public = ed25519_dalek::VerifyingKey::from_bytes(&public).unwrap();
        public
            .verify(b"1700000000.{\"a\":1}", &sig)
            .expect("signed over '<t>.<body>'");
        assert!(public.verify(b"1700000000.{\"a\":2}", &sig).is_err());

        let token = s.token("sub-1", 3, 100);
        assert_eq!(s.check_token(&token, "sub-1", 100).unwrap().generation, 3);
        assert_eq!(
            s.check_token(&token, "sub-2", 100),
            Err(TokenError::Invalid)
        );
        assert_eq!(
            s.check_token(&token, "sub-1", 100 + TOKEN_TTL_SECS + 1),
            Err(TokenError::Expired)
        );
        let other = Signing::from_seed(&[8; 32]);
        assert_eq!(
            other.check_token(&token, "sub-1", 100),
            Err(TokenError::Invalid)
        );
    }
}

//! The one signer of what the service hands out and later takes back as proof: session cookies
//! and stream tickets (`super::signed_value`) and attachment URLs (`crate::http::attachments`).
//! HMAC-SHA256 with the `hmac` crate, whose `verify_slice` compares in constant time; a value
//! is checked for its signature before its expiry, so a forged value learns nothing from the
//! answer.

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

/// Why a signed value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Not signed by this key, or changed since.
    Signature,
    /// Signed, but its expiry has passed.
    Expired,
}

/// An HMAC-SHA256 key, ready to sign. Cheap to clone.
#[derive(Clone)]
pub struct Signer {
    /// Keyed once; each signature starts from a clone of it.
    keyed: Hmac<Sha256>,
}

impl Signer {
    /// A signer with `key`, or with a random key of its own when `None` (what it signs is then
    /// only accepted by this process, until it stops).
    pub fn new(key: Option<&SecretString>) -> Self {
        match key {
            Some(key) => Self::with_key(key.expose_secret().as_bytes()),
            None => {
                use rand::RngCore;
                let mut key = [0u8; 32];
                rand::thread_rng().fill_bytes(&mut key);
                Self::with_key(&key)
            }
        }
    }

    fn with_key(key: &[u8]) -> Self {
        Signer {
            keyed: Hmac::new_from_slice(key).expect("HMAC takes a key of any length"),
        }
    }

    /// The signature of `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// Whether `signature` is this key's for `message`, and then whether the value is still
    /// valid at `now_ms`: it is until `expires_at_ms` (epoch ms, excluded).
    pub fn verify(
        &self,
        message: &[u8],
        signature: &[u8],
        expires_at_ms: i64,
        now_ms: i64,
    ) -> Result<(), Rejected> {
        let mut mac = self.keyed.clone();
        mac.update(message);
        mac.verify_slice(signature)
            .map_err(|_| Rejected::Signature)?;
        if now_ms >= expires_at_ms {
            return Err(Rejected::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_checked_before_the_expiry() {
        let signer = Signer::new(Some(&SecretString::from("k")));
        let sig = signer.sign(b"m");
        assert_eq!(signer.verify(b"m", &sig, 10, 9), Ok(()));
        assert_eq!(signer.verify(b"m", &sig, 10, 10), Err(Rejected::Expired));
        assert_eq!(signer.verify(b"n", &sig, 10, 10), Err(Rejected::Signature));
        assert_eq!(
            signer.verify(b"m", &sig[..31], 10, 9),
            Err(Rejected::Signature)
        );
        let other = Signer::new(None);
        assert_eq!(other.verify(b"m", &sig, 10, 9), Err(Rejected::Signature));
    }
}

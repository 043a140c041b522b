//! The second factor: RFC 6238 time-based one-time codes (SHA-1, 6 digits, 30 s step),
//! accepting the current step and one step either side.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use totp_rs::{Rfc6238, Secret, TOTP};

use crate::ConfigError;

/// The fixed test secret Aurora uses unless told otherwise (base32, 160 bits).
///
/// It is `JBSWY3DPEHPK3PXP` — the secret of many authenticator-app tutorials — repeated
/// twice, because RFC 6238 (and `totp-rs`) require at least 128 bits.
pub const DEFAULT_TOTP_SECRET: &str = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP";

/// A validated TOTP shared secret.
///
/// Parsing accepts RFC 4648 base32 in either case, with or without `=` padding and
/// spaces. Its `Debug` never shows the secret.
#[derive(Clone)]
pub struct TotpSecret {
    base32: String,
    totp: TOTP,
}

impl TotpSecret {
    /// Parses a base32 secret of at least 128 bits.
    ///
    /// # Errors
    ///
    /// [`ConfigError::TotpSecret`] if the text is not base32 or decodes to fewer than
    /// 16 bytes.
    pub fn parse(base32: &str) -> Result<Self, ConfigError> {
        let normalized: String = base32
            .chars()
            .filter(|c| !c.is_whitespace() && *c != '=')
            .map(|c| c.to_ascii_uppercase())
            .collect();
        let bytes = Secret::Encoded(normalized.clone())
            .to_bytes()
            .map_err(|_| ConfigError::TotpSecret {
                reason: "not RFC 4648 base32",
            })?;
        let too_short = ConfigError::TotpSecret {
            reason: "shorter than 128 bits",
        };
        let rfc = Rfc6238::with_defaults(bytes).map_err(|_| too_short)?;
        let totp = TOTP::from_rfc6238(rfc).map_err(|_| ConfigError::TotpSecret {
            reason: "rejected by totp-rs",
        })?;
        Ok(Self {
            base32: normalized,
            totp,
        })
    }

    /// The secret as normalized base32 (upper case, no padding), e.g. to enrol it in an
    /// authenticator app.
    pub fn as_base32(&self) -> &str {
        &self.base32
    }

    /// The code for the step containing `unix_secs`.
    pub fn code_at(&self, unix_secs: u64) -> String {
        self.totp.generate(unix_secs)
    }

    /// The code for the current step of the system clock.
    pub fn current_code(&self) -> String {
        self.code_at(unix_secs())
    }

    /// Whether `code` is the code of the step containing `unix_secs` or of a step either
    /// side of it.
    pub fn verify_at(&self, code: &str, unix_secs: u64) -> bool {
        // totp-rs computes `step - skew` unchecked; keep clear of the epoch.
        self.totp.check(code.trim(), unix_secs.max(60))
    }

    /// [`verify_at`](Self::verify_at) against the system clock.
    pub fn verify_now(&self, code: &str) -> bool {
        self.verify_at(code, unix_secs())
    }
}

impl Default for TotpSecret {
    fn default() -> Self {
        Self::parse(DEFAULT_TOTP_SECRET).expect("the default secret is valid")
    }
}

impl FromStr for TotpSecret {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Debug for TotpSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TotpSecret(..)")
    }
}

/// The current code for a base32 `secret`; what an authenticator app would show now.
///
/// # Errors
///
/// As [`TotpSecret::parse`].
pub fn totp_now(secret: &str) -> Result<String, ConfigError> {
    Ok(TotpSecret::parse(secret)?.current_code())
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The middle of a step, so ±30 s lands in the neighbouring steps.
    const T: u64 = 1_700_000_025;

    #[test]
    fn accepts_current_step_and_one_step_of_skew() {
        let secret = TotpSecret::default();
        for offset in [-30, 0, 30] {
            let code = secret.code_at(T.saturating_add_signed(offset));
            assert!(secret.verify_at(&code, T), "offset {offset}s rejected");
        }
        for offset in [-60, 60] {
            let code = secret.code_at(T.saturating_add_signed(offset));
            assert!(!secret.verify_at(&code, T), "offset {offset}s accepted");
        }
    }

    #[test]
    fn rejects_malformed_codes() {
        let secret = TotpSecret::default();
        for code in ["", "12345", "1234567", "abcdef", "\u{1F600}"] {
            assert!(!secret.verify_at(code, T), "{code:?} accepted");
        }
        // Near the epoch totp-rs would underflow; it must answer, not panic.
        let _ = secret.verify_at("000000", 0);
    }

    #[test]
    fn parses_lenient_base32_and_rejects_bad_secrets() {
        let lenient = TotpSecret::parse("jbsw y3dp ehpk 3pxp jbsw y3dp ehpk 3pxp").unwrap();
        assert_eq!(lenient.as_base32(), DEFAULT_TOTP_SECRET);
        assert_eq!(lenient.code_at(T), TotpSecret::default().code_at(T));
        assert!(TotpSecret::parse("JBSWY3DPEHPK3PXP").is_err(), "80 bits");
        assert!(TotpSecret::parse("not base32!").is_err());
        assert_eq!(totp_now(DEFAULT_TOTP_SECRET).unwrap().len(), 6);
    }

    #[test]
    fn matches_rfc_6238_sha1_vector() {
        // RFC 6238 appendix B: secret "12345678901234567890", T = 59 → 94287082 (8 digits);
        // 6 digits keep the last six.
        let secret = TotpSecret::parse("GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ").unwrap();
        assert_eq!(secret.code_at(59), "287082");
    }
}

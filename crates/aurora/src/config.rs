//! What the bank knows before it starts: the one customer's credentials, TOTP secret,
//! opening balance and the preference it hands the browser.

use std::fmt;

use crate::TotpSecret;

/// An invalid configuration value; names the option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The TOTP secret could not be used.
    #[error("invalid option `totp_secret`: {reason}")]
    TotpSecret {
        /// Why it was rejected.
        reason: &'static str,
    },
}

/// How an Aurora server behaves. Every value is valid, so a `Config` never fails to serve.
///
/// ```
/// let config = aurora::Config::new()
///     .with_username("bob")
///     .with_starting_balance_cents(5_000);
/// assert_eq!(config.password(), "wonderland");
/// assert_eq!(config.current_totp().len(), 6);
/// ```
#[derive(Clone)]
pub struct Config {
    username: String,
    password: String,
    totp_secret: TotpSecret,
    starting_balance_cents: u64,
    pref: String,
}

impl Config {
    /// The default configuration; see each setter's `# Default`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The customer's username.
    ///
    /// # Default
    ///
    /// `"alice"`
    pub fn with_username(mut self, username: impl Into<String>) -> Self {
        self.username = username.into();
        self
    }

    /// The customer's password.
    ///
    /// # Default
    ///
    /// `"wonderland"`
    pub fn with_password(mut self, password: impl Into<String>) -> Self {
        self.password = password.into();
        self
    }

    /// The TOTP secret the second factor is checked against.
    ///
    /// # Default
    ///
    /// [`DEFAULT_TOTP_SECRET`](crate::DEFAULT_TOTP_SECRET)
    pub fn with_totp_secret(mut self, secret: TotpSecret) -> Self {
        self.totp_secret = secret;
        self
    }

    /// The account balance when the server starts, in cents.
    ///
    /// # Default
    ///
    /// `100_000` (1000.00)
    pub fn with_starting_balance_cents(mut self, cents: u64) -> Self {
        self.starting_balance_cents = cents;
        self
    }

    /// The value the account page writes to `localStorage["aurora.pref"]` after the first
    /// sign-in of a session.
    ///
    /// # Default
    ///
    /// `"aurora-dark"`
    pub fn with_pref(mut self, pref: impl Into<String>) -> Self {
        self.pref = pref.into();
        self
    }

    /// The customer's username.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The customer's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The TOTP secret.
    pub fn totp_secret(&self) -> &TotpSecret {
        &self.totp_secret
    }

    /// The opening balance, in cents.
    pub fn starting_balance_cents(&self) -> u64 {
        self.starting_balance_cents
    }

    /// The value written to `localStorage["aurora.pref"]`.
    pub fn pref(&self) -> &str {
        &self.pref
    }

    /// The TOTP code the server accepts now (it also accepts the previous and next one).
    pub fn current_totp(&self) -> String {
        self.totp_secret.current_code()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            username: "alice".into(),
            password: "wonderland".into(),
            totp_secret: TotpSecret::default(),
            starting_balance_cents: 100_000,
            pref: "aurora-dark".into(),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("username", &self.username)
            .field("password", &"..")
            .field("totp_secret", &self.totp_secret)
            .field("starting_balance_cents", &self.starting_balance_cents)
            .field("pref", &self.pref)
            .finish()
    }
}

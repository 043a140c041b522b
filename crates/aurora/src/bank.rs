//! The server's memory: balance, pending sign-ins, sessions, transfers and counters, all
//! behind one mutex. Nothing here awaits, so a plain `std::sync::Mutex` is enough.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::Config;

/// How long a password-accepted sign-in waits for its TOTP code.
pub(crate) const PENDING_TTL: Duration = Duration::from_secs(300);

/// A snapshot of what the server has done since it started. Serialized in camelCase, as
/// served by `GET /__counters`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Counters {
    /// Sign-ins whose password was accepted.
    pub sign_ins: u64,
    /// Sign-ins rejected for a wrong username or password.
    pub sign_ins_rejected: u64,
    /// TOTP codes accepted (each one issued a session).
    pub totps_accepted: u64,
    /// TOTP codes rejected.
    pub totps_rejected: u64,
    /// Transfers recorded.
    pub transfers: u64,
    /// Account pages served to a signed-in session.
    pub polls_served: u64,
    /// Sessions issued.
    pub sessions: u64,
}

/// One recorded transfer, as listed by `GET /__transfers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Transfer {
    /// Sequence number, from 1.
    pub id: u64,
    /// The payee, as typed.
    pub to: String,
    /// The amount, in cents.
    pub amount_cents: u64,
    /// When it was recorded, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

/// The result of the TOTP step.
pub(crate) enum TotpOutcome {
    /// No such pending sign-in, or it expired; nothing is counted.
    NoPendingSignIn,
    WrongCode,
    Accepted {
        session: String,
    },
}

/// Why a transfer was refused.
pub(crate) enum Refusal {
    InsufficientFunds,
}

/// What the account page shows to one session.
pub(crate) struct AccountView {
    pub balance_cents: u64,
    pub polls: u64,
    /// Whether this render is the session's first after sign-in and should write the pref.
    pub welcome: bool,
}

#[derive(Default)]
struct Session {
    polls: u64,
    welcomed: bool,
}

pub(crate) struct Bank {
    pub config: Config,
    ledger: Mutex<Ledger>,
}

struct Ledger {
    balance_cents: u64,
    pending: HashMap<String, Instant>,
    sessions: HashMap<String, Session>,
    transfers: Vec<Transfer>,
    counters: Counters,
}

impl Bank {
    pub fn new(config: Config) -> Self {
        let ledger = Ledger {
            balance_cents: config.starting_balance_cents(),
            pending: HashMap::new(),
            sessions: HashMap::new(),
            transfers: Vec::new(),
            counters: Counters::default(),
        };
        Self {
            config,
            ledger: Mutex::new(ledger),
        }
    }

    // A panic while holding the lock cannot leave the ledger half-updated in a way that
    // matters to a test app, so poisoning is ignored rather than spread.
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn counters(&self) -> Counters {
        self.ledger().counters
    }

    pub fn transfers(&self) -> Vec<Transfer> {
        self.ledger().transfers.clone()
    }

    /// Checks the password step; on success returns a new pending-sign-in token.
    pub fn sign_in(&self, username: &str, password: &str) -> Option<String> {
        let accepted = username == self.config.username() && password == self.config.password();
        let mut ledger = self.ledger();
        if !accepted {
            ledger.counters.sign_ins_rejected += 1;
            return None;
        }
        ledger.counters.sign_ins += 1;
        let now = Instant::now();
        ledger
            .pending
            .retain(|_, started| now.duration_since(*started) < PENDING_TTL);
        let token = random_token();
        ledger.pending.insert(token.clone(), now);
        Some(token)
    }

    pub fn is_pending(&self, token: &str) -> bool {
        self.ledger()
            .pending
            .get(token)
            .is_some_and(|started| started.elapsed() < PENDING_TTL)
    }

    /// Checks the TOTP step of a pending sign-in; on success the pending token is spent
    /// and a session issued.
    pub fn verify_totp(&self, pending: &str, code: &str) -> TotpOutcome {
        let mut ledger = self.ledger();
        let Some(started) = ledger.pending.get(pending).copied() else {
            return TotpOutcome::NoPendingSignIn;
        };
        if started.elapsed() >= PENDING_TTL {
            ledger.pending.remove(pending);
            return TotpOutcome::NoPendingSignIn;
        }
        if !self.config.totp_secret().verify_now(code) {
            ledger.counters.totps_rejected += 1;
            return TotpOutcome::WrongCode;
        }
        ledger.pending.remove(pending);
        ledger.counters.totps_accepted += 1;
        ledger.counters.sessions += 1;
        let session = random_token();
        ledger.sessions.insert(session.clone(), Session::default());
        TotpOutcome::Accepted { session }
    }

    pub fn has_session(&self, session: &str) -> bool {
        self.ledger().sessions.contains_key(session)
    }

    /// Serves one account page to `session`, counting the poll.
    pub fn poll(&self, session: &str, welcome_requested: bool) -> Option<AccountView> {
        let mut ledger = self.ledger();
        let balance_cents = ledger.balance_cents;
        let state = ledger.sessions.get_mut(session)?;
        state.polls += 1;
        // Only the first welcome writes the pref, so reloading a `?welcome=1` URL (as a
        // resumed task may) cannot paper over a localStorage that was not restored.
        let welcome = welcome_requested && !state.welcomed;
        state.welcomed |= welcome;
        let polls = state.polls;
        ledger.counters.polls_served += 1;
        Some(AccountView {
            balance_cents,
            polls,
            welcome,
        })
    }

    pub fn transfer(&self, to: &str, amount_cents: u64) -> Result<Transfer, Refusal> {
        let mut ledger = self.ledger();
        let balance = ledger
            .balance_cents
            .checked_sub(amount_cents)
            .ok_or(Refusal::InsufficientFunds)?;
        ledger.balance_cents = balance;
        ledger.counters.transfers += 1;
        let transfer = Transfer {
            id: ledger.transfers.len() as u64 + 1,
            to: to.to_owned(),
            amount_cents,
            at_unix_ms: unix_ms(),
        };
        ledger.transfers.push(transfer.clone());
        Ok(transfer)
    }
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn random_token() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

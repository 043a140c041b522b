//! When and how each session dies: drawn once at create from the [`Config`], or from the
//! session's own `chaos.*` metadata.

use std::time::Duration;

use rand::Rng;
use serde_json::{Map, Value};

use crate::config::{Config, DeathMode};

/// The `userMetadata` key that picks this session's death mode.
pub(crate) const DEATH_KEY: &str = "chaos.death";
/// The `userMetadata` key that sets this session's exact lifetime in milliseconds.
pub(crate) const LIFETIME_KEY: &str = "chaos.lifetimeMs";

/// How one session's browser dies, concretely (a [`DeathMode::Mixed`] already resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Death {
    /// Close frame 1001, then a clean TCP close.
    Close,
    /// TCP reset.
    Reset,
    /// Nothing more is forwarded or read.
    Silence,
    /// Dead from the start: every relay connection is closed with 1011 right away.
    OnArrival,
}

impl Death {
    /// The concrete death for a mode; [`DeathMode::Mixed`] picks one at random.
    pub(crate) fn resolve(mode: DeathMode) -> Self {
        match mode {
            DeathMode::Close => Death::Close,
            DeathMode::Reset => Death::Reset,
            DeathMode::Silence => Death::Silence,
            DeathMode::Mixed => match rand::rng().random_range(0..3u8) {
                0 => Death::Close,
                1 => Death::Reset,
                _ => Death::Silence,
            },
        }
    }

    /// The public mode this death shows as (dead on arrival closes like [`DeathMode::Close`]).
    pub(crate) fn mode(self) -> DeathMode {
        match self {
            Death::Close | Death::OnArrival => DeathMode::Close,
            Death::Reset => DeathMode::Reset,
            Death::Silence => DeathMode::Silence,
        }
    }
}

/// A session's fate, decided at create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fate {
    pub(crate) death: Death,
    /// Time from creation to death (zero when dead on arrival).
    pub(crate) after: Duration,
    /// The nominal lifetime, before jitter: what `expiresAt` announces.
    pub(crate) nominal: Duration,
}

/// Per-session overrides read from `userMetadata`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Overrides {
    death: Option<DeathMode>,
    on_arrival: bool,
    lifetime: Option<Duration>,
}

impl Overrides {
    /// Reads `chaos.death` (`close`, `reset`, `silence`, `mixed`, `doa`) and
    /// `chaos.lifetimeMs` (a whole number of milliseconds).
    ///
    /// # Errors
    ///
    /// A message naming the key whose value is not understood.
    pub(crate) fn from_metadata(metadata: Option<&Map<String, Value>>) -> Result<Self, String> {
        let mut out = Overrides::default();
        let Some(m) = metadata else {
            return Ok(out);
        };
        if let Some(v) = m.get(DEATH_KEY) {
            match v.as_str() {
                Some("doa") => out.on_arrival = true,
                Some(s) => {
                    out.death = Some(s.parse().map_err(|_| {
                        format!("{DEATH_KEY} must be one of close, reset, silence, mixed, doa")
                    })?)
                }
                None => return Err(format!("{DEATH_KEY} must be a string")),
            }
        }
        if let Some(v) = m.get(LIFETIME_KEY) {
            let ms = v
                .as_u64()
                .ok_or_else(|| format!("{LIFETIME_KEY} must be a whole number of milliseconds"))?;
            out.lifetime = Some(Duration::from_millis(ms));
        }
        Ok(out)
    }
}

impl Fate {
    /// Draws one session's fate. `deadline` (the create's `timeoutSeconds`) caps the lifetime.
    pub(crate) fn draw(config: &Config, overrides: Overrides, deadline: Option<Duration>) -> Self {
        let mut rng = rand::rng();
        let mode = overrides.death.unwrap_or(config.death);
        let (nominal, after) = match overrides.lifetime {
            Some(exact) => (exact, exact),
            None => (
                config.lifetime,
                jittered(config.lifetime, config.jitter, &mut rng),
            ),
        };
        let (nominal, after) = match deadline {
            Some(d) => (d, after.min(d)),
            None => (nominal, after),
        };
        let on_arrival =
            overrides.on_arrival || (config.doa > 0.0 && rng.random_bool(config.doa.min(1.0)));
        if on_arrival {
            return Fate {
                death: Death::OnArrival,
                after: Duration::ZERO,
                nominal,
            };
        }
        Fate {
            death: Death::resolve(mode),
            after,
            nominal,
        }
    }
}

/// `lifetime ± jitter`, uniformly, never below zero.
fn jittered(lifetime: Duration, jitter: Duration, rng: &mut impl Rng) -> Duration {
    if jitter.is_zero() {
        return lifetime;
    }
    let j = jitter.as_millis().min(i64::MAX as u128) as i64;
    let offset = rng.random_range(-j..=j);
    let base = lifetime.as_millis().min(i64::MAX as u128) as i64;
    Duration::from_millis(base.saturating_add(offset).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let mut rng = rand::rng();
        for _ in 0..1000 {
            let d = jittered(Duration::from_secs(10), Duration::from_secs(2), &mut rng);
            assert!(
                d >= Duration::from_secs(8) && d <= Duration::from_secs(12),
                "{d:?}"
            );
        }
    }

    #[test]
    fn metadata_overrides_mode_and_lifetime() {
        let config = Config::new().death(DeathMode::Close);
        let m = meta(json!({"chaos.death": "reset", "chaos.lifetimeMs": 1500}));
        let o = Overrides::from_metadata(Some(&m)).unwrap();
        let fate = Fate::draw(&config, o, None);
        assert_eq!(fate.death, Death::Reset);
        assert_eq!(fate.after, Duration::from_millis(1500));
    }

    #[test]
    fn doa_wins_and_deadline_caps() {
        let m = meta(json!({"chaos.death": "doa"}));
        let o = Overrides::from_metadata(Some(&m)).unwrap();
        assert_eq!(Fate::draw(&Config::new(), o, None).death, Death::OnArrival);
        assert_eq!(
            Fate::draw(&Config::new().doa(1.0), Overrides::default(), None).death,
            Death::OnArrival
        );
        let capped = Fate::draw(
            &Config::new(),
            Overrides::default(),
            Some(Duration::from_secs(60)),
        );
        assert_eq!(capped.after, Duration::from_secs(60));
    }

    #[test]
    fn bad_metadata_is_refused() {
        for bad in [
            json!({"chaos.death": "explode"}),
            json!({"chaos.death": 3}),
            json!({"chaos.lifetimeMs": -1}),
            json!({"chaos.lifetimeMs": "10"}),
        ] {
            assert!(Overrides::from_metadata(Some(&meta(bad))).is_err());
        }
    }

    #[test]
    fn mixed_resolves_to_a_concrete_death() {
        for _ in 0..50 {
            assert_ne!(Death::resolve(DeathMode::Mixed), Death::OnArrival);
        }
    }
}

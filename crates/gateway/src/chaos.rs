//! When and how each session dies, and when its pages do: drawn once at create from the
//! [`Config`], or from the session's own `chaos.*` metadata.

use std::time::Duration;

use rand::Rng;
use serde_json::{Map, Value};

use crate::config::{Config, DeathMode, PageFault};

/// The `userMetadata` key that picks this session's death mode.
pub(crate) const DEATH_KEY: &str = "chaos.death";
/// The `userMetadata` key that sets this session's exact lifetime in milliseconds.
pub(crate) const LIFETIME_KEY: &str = "chaos.lifetimeMs";
/// The `userMetadata` key that picks this session's page fault.
pub(crate) const PAGE_FAULT_KEY: &str = "chaos.pageFault";
/// The `userMetadata` key that sets when this session's page fault comes, in milliseconds
/// after its creation.
pub(crate) const PAGE_FAULT_AFTER_KEY: &str = "chaos.pageFaultAfterMs";

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
    /// The concrete death for a mode; [`DeathMode::Mixed`] picks one at random,
    /// [`DeathMode::Cycle`] by `serial`, the session's number in creation order.
    pub(crate) fn resolve(mode: DeathMode, serial: u64) -> Self {
        match mode {
            DeathMode::Cycle => [Death::Close, Death::Reset, Death::Silence][(serial % 3) as usize],
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
    /// The fault of its pages, and when after creation (moot if it dies first).
    pub(crate) page_fault: Option<(PageFault, Duration)>,
}

/// Per-session overrides read from `userMetadata`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Overrides {
    death: Option<DeathMode>,
    on_arrival: bool,
    lifetime: Option<Duration>,
    /// Set when the metadata names either page-fault key: both halves, the missing one from
    /// the config.
    page_fault: Option<(PageFault, Duration)>,
}

impl Overrides {
    /// Reads `chaos.death` (`close`, `reset`, `silence`, `mixed`, `doa`), `chaos.lifetimeMs`
    /// (a whole number of milliseconds), `chaos.pageFault` (`crash`, `close`) and
    /// `chaos.pageFaultAfterMs` (a whole number of milliseconds). Either page-fault key alone
    /// takes the other half from `config`'s [`page_fault`](Config::page_fault).
    ///
    /// # Errors
    ///
    /// A message naming the key whose value is not understood, or the page-fault key missing
    /// when `config` has no page fault to take it from.
    pub(crate) fn from_metadata(
        metadata: Option<&Map<String, Value>>,
        config: &Config,
    ) -> Result<Self, String> {
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
        let fault = match m.get(PAGE_FAULT_KEY) {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or_else(|| format!("{PAGE_FAULT_KEY} must be a string"))?
                    .parse::<PageFault>()
                    .map_err(|_| format!("{PAGE_FAULT_KEY} must be one of crash, close"))?,
            ),
        };
        let after = match m.get(PAGE_FAULT_AFTER_KEY) {
            None => None,
            Some(v) => Some(Duration::from_millis(v.as_u64().ok_or_else(|| {
                format!("{PAGE_FAULT_AFTER_KEY} must be a whole number of milliseconds")
            })?)),
        };
        let configured = config.page_fault;
        out.page_fault = match (fault, after) {
            (None, None) => None,
            (Some(fault), Some(after)) => Some((fault, after)),
            (Some(fault), None) => Some((
                fault,
                configured.map(|(_, after)| after).ok_or_else(|| {
                    format!(
                        "{PAGE_FAULT_KEY} needs {PAGE_FAULT_AFTER_KEY}: this gateway schedules no page fault to take it from"
                    )
                })?,
            )),
            (None, Some(after)) => Some((
                configured.map(|(fault, _)| fault).ok_or_else(|| {
                    format!(
                        "{PAGE_FAULT_AFTER_KEY} needs {PAGE_FAULT_KEY} (crash or close): this gateway schedules no page fault to take it from"
                    )
                })?,
                after,
            )),
        };
        Ok(out)
    }
}

impl Fate {
    /// Draws one session's fate. `deadline` (the create's `timeoutSeconds`) caps the lifetime.
    pub(crate) fn draw(
        config: &Config,
        overrides: Overrides,
        deadline: Option<Duration>,
        serial: u64,
    ) -> Self {
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
        let page_fault = overrides.page_fault.or(config.page_fault);
        let on_arrival =
            overrides.on_arrival || (config.doa > 0.0 && rng.random_bool(config.doa.min(1.0)));
        if on_arrival {
            return Fate {
                death: Death::OnArrival,
                after: Duration::ZERO,
                nominal,
                page_fault: None,
            };
        }
        Fate {
            death: Death::resolve(mode, serial),
            after,
            nominal,
            page_fault,
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
        let o = Overrides::from_metadata(Some(&m), &Config::new()).unwrap();
        let fate = Fate::draw(&config, o, None, 0);
        assert_eq!(fate.death, Death::Reset);
        assert_eq!(fate.after, Duration::from_millis(1500));
    }

    #[test]
    fn doa_wins_and_deadline_caps() {
        let m = meta(json!({"chaos.death": "doa"}));
        let o = Overrides::from_metadata(Some(&m), &Config::new()).unwrap();
        assert_eq!(
            Fate::draw(&Config::new(), o, None, 0).death,
            Death::OnArrival
        );
        assert_eq!(
            Fate::draw(&Config::new().doa(1.0), Overrides::default(), None, 0).death,
            Death::OnArrival
        );
        let capped = Fate::draw(
            &Config::new(),
            Overrides::default(),
            Some(Duration::from_secs(60)),
            0,
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
            json!({"chaos.pageFault": "explode"}),
            json!({"chaos.pageFault": true}),
            json!({"chaos.pageFaultAfterMs": 1.5}),
            json!({"chaos.pageFaultAfterMs": "100"}),
            // One half, and no page fault configured to take the other from.
            json!({"chaos.pageFault": "crash"}),
            json!({"chaos.pageFaultAfterMs": 100}),
        ] {
            let err =
                Overrides::from_metadata(Some(&meta(bad.clone())), &Config::new()).unwrap_err();
            let key = bad.as_object().unwrap().keys().next().unwrap().clone();
            assert!(err.contains(&key), "{bad}: {err}");
        }
    }

    #[test]
    fn page_faults_come_from_metadata_or_config() {
        let none = Fate::draw(&Config::new(), Overrides::default(), None, 0);
        assert_eq!(none.page_fault, None);

        let configured = Config::new().page_fault(PageFault::Crash, Duration::from_secs(3));
        let fate = Fate::draw(&configured, Overrides::default(), None, 0);
        assert_eq!(
            fate.page_fault,
            Some((PageFault::Crash, Duration::from_secs(3)))
        );

        let both = meta(json!({"chaos.pageFault": "close", "chaos.pageFaultAfterMs": 250}));
        let o = Overrides::from_metadata(Some(&both), &Config::new()).unwrap();
        assert_eq!(
            Fate::draw(&configured, o, None, 0).page_fault,
            Some((PageFault::Close, Duration::from_millis(250)))
        );

        // Either half alone takes the other from the config.
        let kind = meta(json!({"chaos.pageFault": "close"}));
        let o = Overrides::from_metadata(Some(&kind), &configured).unwrap();
        assert_eq!(
            Fate::draw(&configured, o, None, 0).page_fault,
            Some((PageFault::Close, Duration::from_secs(3)))
        );
        let when = meta(json!({"chaos.pageFaultAfterMs": 100}));
        let o = Overrides::from_metadata(Some(&when), &configured).unwrap();
        assert_eq!(
            Fate::draw(&configured, o, None, 0).page_fault,
            Some((PageFault::Crash, Duration::from_millis(100)))
        );

        // Dead on arrival, nothing to fault.
        let doa = Fate::draw(&configured.clone().doa(1.0), Overrides::default(), None, 0);
        assert_eq!(doa.page_fault, None);
    }

    #[test]
    fn cycle_meets_every_mode_in_turn() {
        let deaths: Vec<_> = (0..4)
            .map(|n| Death::resolve(DeathMode::Cycle, n))
            .collect();
        assert_eq!(
            deaths,
            [Death::Close, Death::Reset, Death::Silence, Death::Close]
        );
    }

    #[test]
    fn mixed_resolves_to_a_concrete_death() {
        for _ in 0..50 {
            assert_ne!(Death::resolve(DeathMode::Mixed, 0), Death::OnArrival);
        }
    }
}

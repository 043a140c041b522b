//! The unplanned deaths: [`Chaotic`], a provider whose sessions die early or on arrival.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use outlive::solari_browser::CreateSessionOptions;
use outlive::{BoxFuture, Provider, Session, Solari, SolariLaunch};
use outlive_bed::bed::TestBed;

/// The unplanned deaths, as the summary states them.
pub const UNPLANNED: &str = "runs 1 and 2 mod 3: the first session dies at 319/608 of the lifetime; runs 1 mod 3: the second session is dead on arrival";

/// Whether run `index` meets unplanned deaths (else only deaths of old age).
pub(super) fn unplanned(index: u32) -> bool {
    index % 3 != 0
}

/// A Solari provider whose sessions die early or on arrival on the gateway's chaos metadata,
/// by launch number.
pub(super) struct Chaotic {
    normal: Solari,
    doa: Solari,
    early: Solari,
    launches: AtomicU32,
    /// Launch numbers (from 0) dead on arrival / dying early.
    doa_at: Option<u32>,
    early_at: Option<u32>,
}

impl Chaotic {
    pub(super) fn new(bed: &TestBed, index: u32, lifetime: Duration) -> Chaotic {
        let with = |meta: serde_json::Value| {
            let map = meta.as_object().cloned().unwrap_or_default();
            Solari::new(bed.client().clone()).launch_options(
                SolariLaunch::new().create(CreateSessionOptions::new().user_metadata(map)),
            )
        };
        let early_ms = lifetime.as_millis() as u64 * 319 / 608;
        Chaotic {
            normal: bed.provider(),
            doa: with(serde_json::json!({"chaos.death": "doa"})),
            early: with(serde_json::json!({"chaos.lifetimeMs": early_ms})),
            launches: AtomicU32::new(0),
            doa_at: (index % 3 == 1).then_some(1),
            early_at: unplanned(index).then_some(0),
        }
    }
}

impl Provider for Chaotic {
    fn name(&self) -> &str {
        "solari (bench chaos)"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        let n = self.launches.fetch_add(1, Ordering::SeqCst);
        if Some(n) == self.doa_at {
            self.doa.launch()
        } else if Some(n) == self.early_at {
            self.early.launch()
        } else {
            self.normal.launch()
        }
    }
}

//! `outlive-lab probe` against the in-process gateway: it times each session's death, names its
//! cause, shows the control plane calling the dead session active, and releases everything.

use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::time::Duration;

use gateway::DeathMode;
use outlive_lab::probe::{ProbeConfig, Sample, probe, summary};

/// Probes two sessions of a gateway whose sessions die by `death` after 2 s, and checks that
/// the probe released them all; returns the samples and those `on_sample` saw.
async fn probe_gateway(death: DeathMode) -> (Vec<Sample>, Vec<Sample>) {
    let gw = gateway::spawn(
        gateway::Config::new()
            .lifetime(Duration::from_secs(2))
            .jitter(Duration::ZERO)
            .death(death),
    )
    .await
    .unwrap();
    let config = ProbeConfig {
        max_hold: Duration::from_secs(10),
        ..probe_config(&gw, 2)
    };
    let seen = Mutex::new(Vec::new());
    let samples = probe(&config, |s| seen.lock().unwrap().push(s.clone()))
        .await
        .unwrap();
    assert_released(&gw.shutdown().await.unwrap());
    (samples, seen.into_inner().unwrap())
}

/// Probing `sessions` sessions of `gw`, with a heartbeat every 500 ms.
fn probe_config(gw: &gateway::Gateway, sessions: u32) -> ProbeConfig {
    ProbeConfig {
        sessions,
        heartbeat: Duration::from_millis(500),
        ..ProbeConfig::new(gw.base_url(), gw.api_key())
    }
}

fn assert_released(status: &gateway::Status) {
    assert_eq!(
        (
            status.live_sessions,
            status.dead_sessions,
            status.chromium_processes
        ),
        (0, 0, 0),
        "every session released, every Chromium gone"
    );
}

/// Asserts that both probed sessions died by `cause`, each `lifetime_ms` within `lifetimes`.
fn assert_both_died(samples: &[Sample], cause: &str, lifetimes: RangeInclusive<u64>) {
    assert_eq!(
        samples.iter().map(|s| s.session).collect::<Vec<_>>(),
        [0, 1]
    );
    for s in samples {
        let lifetime = s.lifetime_ms.unwrap_or_else(|| panic!("no death: {s:?}"));
        assert!(lifetimes.contains(&lifetime), "{s:?}");
        assert_eq!(s.cause, cause, "{s:?}");
    }
}

/// Asserts that the control plane called every dead session alive.
fn assert_control_plane_said_active(samples: &[Sample]) {
    for s in samples {
        assert_eq!(
            s.control_plane_said.as_deref(),
            Some("active"),
            "the control plane calls it alive: {s:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_deaths_by_close_frame() {
    let (samples, seen) = probe_gateway(DeathMode::Close).await;
    assert_eq!(samples, seen, "on_sample saw every sample, in order");
    assert_both_died(&samples, "close", 2_000..=4_000);
    assert_control_plane_said_active(&samples);
    let text = summary(&samples);
    assert!(text.contains("causes: close 2"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_deaths_by_silence() {
    let (samples, _) = probe_gateway(DeathMode::Silence).await;
    // The unanswered heartbeat was sent within one interval of the death.
    assert_both_died(&samples, "silence", 2_000..=4_500);
    assert_control_plane_said_active(&samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_deaths_by_reset() {
    let (samples, _) = probe_gateway(DeathMode::Reset).await;
    assert_both_died(&samples, "reset", 2_000..=4_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_alive_at_max_hold_is_sampled_alive_and_released() {
    let gw = long_lived_gateway().await;
    // The hold outlasts the launch and several heartbeats.
    let config = ProbeConfig {
        max_hold: Duration::from_secs(4),
        ..probe_config(&gw, 1)
    };
    let samples = probe(&config, |_| {}).await.unwrap();
    assert_eq!(samples.len(), 1);
    assert_eq!(
        (samples[0].lifetime_ms, samples[0].cause.as_str()),
        (None, "alive")
    );
    assert_eq!(samples[0].control_plane_said.as_deref(), Some("active"));
    assert_released(&gw.shutdown().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_probe_still_releases_its_session() {
    let gw = long_lived_gateway().await;
    let config = probe_config(&gw, 1);
    // Cancel the probe while it holds the session: once the session is live, drop the future.
    {
        let running = probe(&config, |_| {
            panic!("the session cannot end before the cancel")
        });
        tokio::pin!(running);
        // "Holds" means the probe has the session and its websocket. (A session the gateway
        // counts as live may not have reached the probe yet: the create's answer is still on
        // its way.)
        let mut watch = tokio::time::interval(Duration::from_millis(20));
        loop {
            tokio::select! {
                _ = &mut running => panic!("the probe ended on its own"),
                _ = watch.tick() => if gw.status().relay_clients == 1 { break },
            }
        }
    }
    // The Lease's Drop spawned the release; wait for the gateway to see it.
    let mut watch = tokio::time::interval(Duration::from_millis(20));
    let released = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            watch.tick().await;
            let s = gw.status();
            if s.live_sessions + s.dead_sessions == 0 {
                break;
            }
        }
    })
    .await;
    assert!(
        released.is_ok(),
        "the dropped probe's session was not released: {:?}",
        gw.status()
    );
    assert_released(&gw.shutdown().await.unwrap());
}

/// A gateway whose sessions outlive any probe hold in these tests.
async fn long_lived_gateway() -> gateway::Gateway {
    gateway::spawn(
        gateway::Config::new()
            .lifetime(Duration::from_secs(60))
            .jitter(Duration::ZERO),
    )
    .await
    .unwrap()
}

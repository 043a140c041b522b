use std::collections::{BTreeMap, BTreeSet};

use prometheus_client::encoding::text::encode;

use super::*;

const ALL_CAUSES: [DeathCause; 8] = [
    DeathCause::Closed,
    DeathCause::Reset,
    DeathCause::Silence,
    DeathCause::ProcessExit,
    DeathCause::ProbeFailed,
    DeathCause::PageCrashed,
    DeathCause::PageClosed,
    DeathCause::PageHung,
];

fn text(registry: &Registry) -> String {
    let mut out = String::new();
    encode(&mut out, registry).unwrap();
    out
}

/// Every sample's series (name and labels) in `text`.
fn series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.rsplit_once(' ').unwrap().0.to_owned())
        .collect()
}

/// The label sets of `name`'s samples, as written.
fn labels_of(text: &str, name: &str) -> BTreeSet<String> {
    series(text)
        .into_iter()
        .filter_map(|s| s.strip_prefix(name)?.strip_prefix('{').map(str::to_owned))
        .collect()
}

#[test]
fn every_family_is_named_the_prometheus_way() {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    // A family with labels shows once it has a series: the deaths' are there from the start.
    assert!(text(&registry).contains("outlive_deaths_total{cause=\"closed\"} 0"));
    one_run(&metrics);
    let text = text(&registry);
    let families: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_once(' ').unwrap())
        .collect();
    let expected = [
        ("outlive_deaths", "counter"),
        ("outlive_sessions_started", "counter"),
        ("outlive_sessions_live", "gauge"),
        ("outlive_relaunch_duration_seconds", "histogram"),
        ("outlive_checkpoint_duration_seconds", "histogram"),
        ("outlive_checkpoint_bytes", "histogram"),
        ("outlive_redone_seconds", "counter"),
        ("outlive_rotations", "counter"),
        ("outlive_gave_up", "counter"),
        ("outlive_provider_errors", "counter"),
    ];
    assert_eq!(families, BTreeMap::from(expected), "{text}");
    assert!(text.contains("outlive_redone_seconds_total 1.5"), "{text}");
}

/// What one run records: every cause, two providers, every operation.
fn one_run(metrics: &Metrics) {
    for cause in ALL_CAUSES {
        if !cause.is_page() {
            metrics.died(cause);
        }
    }
    for provider in ["solari", "local"] {
        let live = metrics.session_started(provider);
        live.failed(Operation::Release);
        metrics.provider_failed(provider, Operation::Launch);
        metrics.provider_failed(provider, Operation::Connect);
    }
    metrics.relaunched(Duration::from_millis(700));
    metrics.checkpointed(Duration::from_millis(30), 40_000);
    metrics.redone(Duration::from_millis(1500));
}

#[test]
fn labels_stay_bounded_however_many_runs_record() {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    one_run(&metrics);
    let after_one = series(&text(&registry));
    for _ in 1..500 {
        one_run(&metrics);
    }
    let text = text(&registry);
    // What 500 runs leave is what one leaves: no label grows with runs.
    assert_eq!(series(&text), after_one);
    assert_eq!(labels_of(&text, "outlive_deaths_total").len(), 5, "{text}");
    assert_eq!(labels_of(&text, "outlive_sessions_started_total").len(), 2);
    assert_eq!(labels_of(&text, "outlive_provider_errors_total").len(), 6);
    assert!(
        text.contains("outlive_deaths_total{cause=\"silence\"} 500"),
        "{text}"
    );
    assert!(text.contains("outlive_sessions_live 0"), "{text}");
    assert!(text.contains("outlive_redone_seconds_total 750"), "{text}");
    assert!(
        text.contains("outlive_relaunch_duration_seconds_count 500"),
        "{text}"
    );
}

#[test]
fn a_live_session_counts_until_it_is_dropped() {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let a = metrics.session_started("solari");
    let b = metrics.clone().session_started("solari");
    assert!(text(&registry).contains("outlive_sessions_live 2"));
    drop(a);
    assert!(text(&registry).contains("outlive_sessions_live 1"));
    drop(b);
    let text = text(&registry);
    assert!(text.contains("outlive_sessions_live 0"), "{text}");
    assert!(
        text.contains("outlive_sessions_started_total{provider=\"solari\"} 2"),
        "{text}"
    );
}

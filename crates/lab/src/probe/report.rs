//! The probe's [`summary`]: a few lines for people.

use std::collections::BTreeMap;

use super::Sample;
use crate::stats::median;

/// A few lines for people: how many sessions, min/median/max lifetime, how many ended by
/// each cause, and what the control plane said about the dead ones.
pub fn summary(samples: &[Sample]) -> String {
    if samples.is_empty() {
        return "no sessions probed".to_owned();
    }
    let n = samples.len();
    let mut out = format!("{n} session{} probed", if n == 1 { "" } else { "s" });

    let mut lifetimes: Vec<u64> = samples.iter().filter_map(|s| s.lifetime_ms).collect();
    lifetimes.sort_unstable();
    match (lifetimes.first(), lifetimes.last()) {
        (Some(&min), Some(&max)) => out.push_str(&format!(
            "\nlifetime: min {}, median {}, max {} (over {} death{})",
            format_ms(min),
            format_ms(median(&lifetimes.iter().map(|&ms| ms as f64).collect::<Vec<_>>()) as u64),
            format_ms(max),
            lifetimes.len(),
            if lifetimes.len() == 1 { "" } else { "s" },
        )),
        _ => out.push_str("\nlifetime: no session died during its hold"),
    }

    let order = ["close", "reset", "silence", "alive", "error"];
    let mut causes: BTreeMap<(usize, &str), usize> = BTreeMap::new();
    for s in samples {
        let rank = order
            .iter()
            .position(|c| *c == s.cause)
            .unwrap_or(order.len());
        *causes.entry((rank, s.cause.as_str())).or_default() += 1;
    }
    let causes: Vec<String> = causes
        .iter()
        .map(|((_, c), k)| format!("{c} {k}"))
        .collect();
    out.push_str(&format!("\ncauses: {}", causes.join(", ")));

    let mut said: BTreeMap<&str, usize> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.lifetime_ms.is_some()) {
        *said
            .entry(s.control_plane_said.as_deref().unwrap_or("(no answer)"))
            .or_default() += 1;
    }
    if !said.is_empty() {
        let said: Vec<String> = said
            .iter()
            .map(|(status, k)| format!("\"{status}\" {k}"))
            .collect();
        out.push_str(&format!(
            "\ncontrol plane right after each death: {}",
            said.join(", ")
        ));
    }
    out
}

/// `850 ms`, `2.41 s`, `10 min 2.5 s`.
fn format_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.2} s", ms as f64 / 1_000.0),
        _ => format!(
            "{} min {:.1} s",
            ms / 60_000,
            (ms % 60_000) as f64 / 1_000.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(session: u32, lifetime_ms: Option<u64>, cause: &str, said: Option<&str>) -> Sample {
        Sample {
            session,
            lifetime_ms,
            cause: cause.to_owned(),
            control_plane_said: said.map(str::to_owned),
        }
    }

    #[test]
    fn summary_gives_min_median_max_and_causes() {
        let samples = [
            sample(0, Some(2_000), "close", Some("active")),
            sample(1, Some(3_000), "silence", Some("active")),
            sample(2, Some(2_500), "close", Some("active")),
            sample(3, Some(4_001), "reset", None),
            sample(4, None, "alive", Some("active")),
            sample(5, None, "error", None),
        ];
        let text = summary(&samples);
        assert!(text.starts_with("6 sessions probed"), "{text}");
        assert!(
            text.contains("min 2.00 s, median 2.75 s, max 4.00 s (over 4 deaths)"),
            "{text}"
        );
        assert!(
            text.contains("causes: close 2, reset 1, silence 1, alive 1, error 1"),
            "{text}"
        );
        assert!(text.contains(r#""(no answer)" 1, "active" 3"#), "{text}");
    }

    #[test]
    fn summary_of_nothing_and_of_no_deaths() {
        assert_eq!(summary(&[]), "no sessions probed");
        let text = summary(&[sample(0, None, "alive", Some("active"))]);
        assert!(text.contains("no session died"), "{text}");
        assert!(text.contains("causes: alive 1"), "{text}");
        assert!(!text.contains("control plane"), "{text}");
    }

    #[test]
    fn durations() {
        assert_eq!(format_ms(850), "850 ms");
        assert_eq!(format_ms(2_410), "2.41 s");
        assert_eq!(format_ms(602_500), "10 min 2.5 s");
    }
}

//! An SVG timeline of benchmark runs: one lane per run on a shared time axis, showing each
//! browser session, each death, each rotation, each successor or standby waiting beside the
//! session, each checkpoint and each successful poll.
//!
//! [`render`] is a pure function: it returns a standalone SVG document (no external fonts,
//! scripts or images) about 960 px wide, readable where GitHub shows a README.

use std::fmt::Write;

use outlive::Outcome;
use serde::{Deserialize, Serialize};

/// Which side of the benchmark a run was on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Arm {
    /// The task on a plain browser session, without outlive.
    Baseline,
    /// The task through outlive.
    Outlive,
}

impl Arm {
    /// The lowercase name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Arm::Baseline => "baseline",
            Arm::Outlive => "outlive",
        }
    }
}

/// One run, as the timeline draws it. Every time is in milliseconds since the run started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineRun {
    /// The lane's label, e.g. `baseline #1` or `outlive #1`.
    pub label: String,
    /// Which arm the run belongs to.
    pub arm: Arm,
    /// How long the run took.
    pub total_ms: u64,
    /// How the run ended; serialised as `completed`, `failed` or `gave_up`.
    #[serde(with = "OutcomeName")]
    pub outcome: Outcome,
    /// Each browser session the run used, in order.
    pub sessions: Vec<SessionSpan>,
    /// When each death was detected.
    pub deaths: Vec<u64>,
    /// When each checkpoint was taken.
    pub checkpoints: Vec<u64>,
    /// When each poll succeeded.
    pub polls: Vec<u64>,
    /// When the task moved to a successor at a safe point.
    #[serde(default)]
    pub rotations: Vec<u64>,
    /// Successors and standbys, from their launch to taking over (or being let go).
    #[serde(default)]
    pub standby: Vec<SessionSpan>,
}

/// [`Outcome`]'s serialised form, for reading runs back (outlive's own type only
/// serialises).
#[derive(Serialize, Deserialize)]
#[serde(remote = "Outcome", rename_all = "snake_case")]
enum OutcomeName {
    Completed,
    Failed,
    GaveUp,
}

/// The time one browser session was in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSpan {
    /// When the session was handed to the run.
    pub start_ms: u64,
    /// When the run stopped using it.
    pub end_ms: u64,
}

const WIDTH: f64 = 960.0;
/// Left edge of the plot; the lane labels sit left of it.
const PLOT_X0: f64 = 170.0;
/// Right edge of the plot; the outcomes sit right of it.
const PLOT_X1: f64 = 840.0;
const TOP: f64 = 64.0;
const LANE_H: f64 = 36.0;
const BAR_H: f64 = 14.0;
const AXIS_H: f64 = 36.0;
/// The shortest axis: empty and zero-length runs still get a readable scale.
const MIN_AXIS_MS: u64 = 1_000;
/// Longest label drawn in full; longer ones are cut (the full text is the lane's tooltip).
const MAX_LABEL_CHARS: usize = 22;

const FONT: &str = "-apple-system,BlinkMacSystemFont,'Segoe UI',Helvetica,Arial,sans-serif";
const INK: &str = "#24292f";
const MUTED: &str = "#57606a";
const GRID: &str = "#d0d7de";
const DEATH: &str = "#cf222e";
const CHECKPOINT: &str = "#0969da";
const POLL: &str = "#1a7f37";
const GAVE_UP: &str = "#bc4c00";
const ROTATION: &str = "#1b7c83";
const STANDBY: &str = "#c4b0f0";

/// Renders `runs` as a standalone SVG document, one lane per run, in the given order.
///
/// The axis runs from 0 to the latest time in any run (its total, a session's end, or a
/// mark), and at least to 1 s; an empty slice gives a small document saying there are no
/// runs.
///
/// ```
/// use outlive::Outcome;
/// use outlive_lab::timeline::{render, Arm, SessionSpan, TimelineRun};
///
/// let run = TimelineRun {
///     label: "outlive #1".into(),
///     arm: Arm::Outlive,
///     total_ms: 9_000,
///     outcome: Outcome::Completed,
///     sessions: vec![SessionSpan { start_ms: 0, end_ms: 4_000 }, SessionSpan { start_ms: 4_600, end_ms: 9_000 }],
///     deaths: vec![4_000],
///     checkpoints: vec![1_000, 3_000, 6_000],
///     polls: vec![500, 1_500, 2_500, 5_000, 8_000],
///     rotations: vec![],
///     standby: vec![],
/// };
/// let svg = render(&[run]);
/// assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
/// ```
pub fn render(runs: &[TimelineRun]) -> String {
    let scale = Scale::for_runs(runs);
    let lanes = runs.len().max(1) as f64;
    let axis_y = TOP + lanes * LANE_H + 8.0;
    let height = axis_y + AXIS_H;

    let mut svg = String::with_capacity(4096 + runs.len() * 2048);
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="Timeline of {n} benchmark run{s}" font-family="{FONT}" font-size="12">"#,
        height = num(height),
        n = runs.len(),
        s = if runs.len() == 1 { "" } else { "s" },
    );
    let _ = writeln!(
        svg,
        r##"<rect width="100%" height="100%" fill="#ffffff"/>"##
    );
    legend(&mut svg);
    grid(&mut svg, &scale, axis_y);
    if runs.is_empty() {
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle" fill="{MUTED}">no runs</text>"#,
            num((PLOT_X0 + PLOT_X1) / 2.0),
            num(TOP + LANE_H / 2.0 + 4.0),
        );
    }
    for (i, run) in runs.iter().enumerate() {
        lane(&mut svg, &scale, run, TOP + i as f64 * LANE_H);
    }
    svg.push_str("</svg>\n");
    svg
}

/// Milliseconds to x coordinates.
struct Scale {
    /// The axis end; at least [`MIN_AXIS_MS`], so nothing divides by zero.
    max_ms: u64,
}

impl Scale {
    fn for_runs(runs: &[TimelineRun]) -> Self {
        let latest = runs
            .iter()
            .map(|r| {
                let spans = r.sessions.iter().map(|s| s.start_ms.max(s.end_ms));
                let marks = r
                    .deaths
                    .iter()
                    .chain(&r.checkpoints)
                    .chain(&r.polls)
                    .chain(&r.rotations)
                    .copied();
                let spans = spans.chain(r.standby.iter().map(|s| s.start_ms.max(s.end_ms)));
                spans.chain(marks).fold(r.total_ms, u64::max)
            })
            .max()
            .unwrap_or(0);
        Scale {
            max_ms: latest.max(MIN_AXIS_MS),
        }
    }

    fn x(&self, ms: u64) -> f64 {
        PLOT_X0 + (ms.min(self.max_ms) as f64 / self.max_ms as f64) * (PLOT_X1 - PLOT_X0)
    }

    /// A round tick step giving at most ten intervals.
    fn tick_ms(&self) -> u64 {
        const STEPS: [u64; 16] = [
            100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
            600_000, 900_000, 1_800_000, 3_600_000,
        ];
        STEPS
            .into_iter()
            .find(|step| self.max_ms.div_ceil(*step) <= 10)
            .unwrap_or_else(|| self.max_ms.div_ceil(10).max(1))
    }
}

fn legend(svg: &mut String) {
    let y = 24.0;
    let _ = writeln!(svg, r#"<g class="legend" fill="{INK}">"#);
    let mut x = PLOT_X0;
    let _ = writeln!(
        svg,
        r##"<rect x="{}" y="{}" width="22" height="{BAR_H}" rx="3" fill="#8c959f"/><rect x="{}" y="{}" width="22" height="{BAR_H}" rx="3" fill="#8250df"/>"##,
        num(x),
        num(y - BAR_H / 2.0),
        num(x + 24.0),
        num(y - BAR_H / 2.0),
    );
    x += 52.0;
    legend_text(svg, x, y, "session (baseline / outlive)");
    x += 180.0;
    // Each mark, where it and its label sit from `x`, and the room the pair takes.
    type Mark = fn(&mut String, f64, f64);
    let marks = [
        (death_mark as Mark, 5.0, 16.0, "death", 58.0),
        (rotation_mark, 5.0, 16.0, "rotation", 76.0),
        (standby_mark, 0.0, 16.0, "standby", 70.0),
        (checkpoint_mark, 4.0, 14.0, "checkpoint", 86.0),
        (poll_mark, 4.0, 14.0, "poll", 0.0),
    ];
    for (mark, mark_dx, text_dx, label, room) in marks {
        mark(svg, x + mark_dx, y);
        legend_text(svg, x + text_dx, y, label);
        x += room;
    }
    let _ = writeln!(svg, "</g>");
}

fn legend_text(svg: &mut String, x: f64, y: f64, label: &str) {
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}">{label}</text>"#,
        num(x),
        num(y + 4.0)
    );
}

fn grid(svg: &mut String, scale: &Scale, axis_y: f64) {
    let step = scale.tick_ms();
    let _ = writeln!(svg, r#"<g class="axis" fill="{MUTED}" stroke="{GRID}">"#);
    let _ = writeln!(
        svg,
        r#"<line x1="{}" y1="{}" x2="{}" y2="{}"/>"#,
        num(PLOT_X0),
        num(axis_y),
        num(PLOT_X1),
        num(axis_y),
    );
    let mut next = Some(0);
    while let Some(ms) = next.filter(|ms| *ms <= scale.max_ms) {
        let x = num(scale.x(ms));
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke-dasharray="2 3"/><text x="{x}" y="{}" text-anchor="middle" stroke="none">{}</text>"#,
            num(TOP - 6.0),
            num(axis_y + 4.0),
            num(axis_y + 18.0),
            seconds(ms, step),
        );
        next = ms.checked_add(step);
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end" stroke="none">time since run start</text>"#,
        num(PLOT_X0 - 26.0),
        num(axis_y + 18.0),
    );
    let _ = writeln!(svg, "</g>");
}

fn lane(svg: &mut String, scale: &Scale, run: &TimelineRun, top: f64) {
    let mid = top + LANE_H / 2.0;
    let (bar_fill, band) = match run.arm {
        Arm::Baseline => ("#8c959f", "#f6f8fa"),
        Arm::Outlive => ("#8250df", "#fbf8ff"),
    };
    let _ = writeln!(
        svg,
        r#"<g class="lane" data-arm="{}"><title>{}</title>"#,
        run.arm.as_str(),
        escape(&run.label)
    );
    let _ = writeln!(
        svg,
        r#"<rect x="0" y="{}" width="{WIDTH}" height="{LANE_H}" fill="{band}"/>"#,
        num(top + 1.0),
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end" fill="{INK}">{}</text>"#,
        num(PLOT_X0 - 10.0),
        num(mid + 4.0),
        escape(&clip(&run.label, MAX_LABEL_CHARS)),
    );
    // The run's extent, so a lane with no sessions still shows how long it lasted.
    let _ = writeln!(
        svg,
        r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{GRID}" stroke-width="2"/>"#,
        num(scale.x(0)),
        num(mid),
        num(scale.x(run.total_ms)),
        num(mid),
    );
    for span in &run.sessions {
        bar(svg, scale, span, mid - BAR_H / 2.0, BAR_H, 3.0, bar_fill);
    }
    for span in &run.standby {
        bar(svg, scale, span, mid + BAR_H / 2.0 + 1.0, 4.0, 1.0, STANDBY);
    }
    for &ms in &run.polls {
        poll_mark(svg, scale.x(ms), mid + BAR_H / 2.0 + 5.0);
    }
    for &ms in &run.rotations {
        rotation_mark(svg, scale.x(ms), mid);
    }
    for &ms in &run.checkpoints {
        checkpoint_mark(svg, scale.x(ms), mid - BAR_H / 2.0 - 4.0);
    }
    for &ms in &run.deaths {
        let x = scale.x(ms);
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{DEATH}" stroke-width="1" stroke-opacity="0.6"/>"#,
            num(top + 3.0),
            num(top + LANE_H - 1.0),
            x = num(x),
        );
        death_mark(svg, x, mid);
    }
    let (colour, shown) = outcome_style(run.outcome);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" fill="{colour}" font-weight="600">{}</text><text x="{}" y="{}" fill="{MUTED}" text-anchor="end">{}</text>"#,
        num(PLOT_X1 + 12.0),
        num(mid + 4.0),
        shown,
        num(WIDTH - 8.0),
        num(mid + 4.0),
        seconds(run.total_ms, 100),
    );
    let _ = writeln!(svg, "</g>");
}

fn death_mark(svg: &mut String, x: f64, y: f64) {
    let r = 5.0;
    let _ = writeln!(
        svg,
        r#"<path d="M{} {}L{} {}M{} {}L{} {}" stroke="{DEATH}" stroke-width="2.5" stroke-linecap="round"/>"#,
        num(x - r),
        num(y - r),
        num(x + r),
        num(y + r),
        num(x - r),
        num(y + r),
        num(x + r),
        num(y - r),
    );
}

/// One span as a bar at `y`; a zero-length span still gets a sliver.
fn bar(svg: &mut String, scale: &Scale, span: &SessionSpan, y: f64, h: f64, rx: f64, fill: &str) {
    let (start, end) = (
        span.start_ms.min(span.end_ms),
        span.start_ms.max(span.end_ms),
    );
    let x = scale.x(start);
    let _ = writeln!(
        svg,
        r#"<rect x="{}" y="{}" width="{}" height="{}" rx="{}" fill="{fill}"/>"#,
        num(x),
        num(y),
        num((scale.x(end) - x).max(1.5)),
        num(h),
        num(rx),
    );
}

/// A diamond: the task moved to its successor here.
fn rotation_mark(svg: &mut String, x: f64, y: f64) {
    let r = 5.0;
    let _ = writeln!(
        svg,
        r#"<path d="M{} {}L{} {}L{} {}L{} {}Z" fill="{ROTATION}"/>"#,
        num(x),
        num(y - r),
        num(x + r),
        num(y),
        num(x),
        num(y + r),
        num(x - r),
        num(y),
    );
}

/// The legend's sample of a standby bar.
fn standby_mark(svg: &mut String, x: f64, y: f64) {
    let _ = writeln!(
        svg,
        r#"<rect x="{}" y="{}" width="12" height="4" rx="1" fill="{STANDBY}"/>"#,
        num(x),
        num(y - 2.0),
    );
}

fn checkpoint_mark(svg: &mut String, x: f64, y: f64) {
    let _ = writeln!(
        svg,
        r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{CHECKPOINT}" stroke-width="2"/>"#,
        num(y - 4.0),
        num(y + 4.0),
        x = num(x),
    );
}

fn poll_mark(svg: &mut String, x: f64, y: f64) {
    let _ = writeln!(
        svg,
        r#"<circle cx="{}" cy="{}" r="2" fill="{POLL}"/>"#,
        num(x),
        num(y)
    );
}

/// The colour and wording of an outcome.
fn outcome_style(outcome: Outcome) -> (&'static str, &'static str) {
    match outcome {
        Outcome::Completed => (POLL, "completed"),
        Outcome::Failed => (DEATH, "failed"),
        Outcome::GaveUp => (GAVE_UP, "gave up"),
    }
}

/// `ms` in seconds, with a tenth only when the step needs one and it is not zero: `0s`,
/// `2.5s`, `3s`, `120s`.
fn seconds(ms: u64, step_ms: u64) -> String {
    if step_ms % 1_000 == 0 || ms % 1_000 < 100 {
        format!("{}s", ms / 1_000)
    } else {
        format!("{}.{}s", ms / 1_000, ms % 1_000 / 100)
    }
}

/// A coordinate with at most one decimal. Every coordinate comes from finite arithmetic on
/// the constants and integers above, so there is no NaN or infinity to print.
fn num(v: f64) -> String {
    let rounded = (v * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        format!("{}", rounded as i64)
    } else {
        format!("{rounded:.1}")
    }
}

/// At most `max` characters, the last one `…` if cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Text safe inside an SVG element or a quoted attribute: characters XML 1.0 forbids are
/// replaced (html-escape leaves them), then the five XML specials are escaped.
fn escape(text: &str) -> String {
    let allowed: String = text
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => ' ',
            c if (c as u32) < 0x20 || matches!(c, '\u{FFFE}' | '\u{FFFF}') => '\u{FFFD}',
            c => c,
        })
        .collect();
    html_escape::encode_quoted_attribute(&allowed).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(label: &str, arm: Arm, total_ms: u64) -> TimelineRun {
        TimelineRun {
            label: label.to_owned(),
            arm,
            total_ms,
            outcome: Outcome::Completed,
            sessions: vec![
                SessionSpan {
                    start_ms: 0,
                    end_ms: total_ms / 2,
                },
                SessionSpan {
                    start_ms: total_ms / 2 + 300,
                    end_ms: total_ms,
                },
            ],
            deaths: vec![total_ms / 2],
            checkpoints: vec![total_ms / 4, total_ms * 3 / 4],
            polls: (0..10).map(|i| i * total_ms / 10).collect(),
            rotations: vec![],
            standby: vec![],
        }
    }

    fn assert_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg "), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<svg").count(), 1);
        let lower = svg.to_ascii_lowercase();
        for bad in ["nan", "inf"] {
            assert!(!lower.contains(bad), "{bad} in {svg}");
        }
        assert_eq!(
            svg.matches("<g").count(),
            svg.matches("</g>").count(),
            "{svg}"
        );
        assert_eq!(
            svg.matches("<text").count(),
            svg.matches("</text>").count(),
            "{svg}"
        );
        for forbidden in ["<script", "href=", "@import", "url("] {
            assert!(!svg.contains(forbidden), "{forbidden} in {svg}");
        }
    }

    #[test]
    fn draws_one_lane_per_run() {
        let runs = [
            run("baseline #1", Arm::Baseline, 3_200),
            run("outlive #1", Arm::Outlive, 41_000),
            run("outlive #2", Arm::Outlive, 39_500),
        ];
        let svg = render(&runs);
        assert_well_formed(&svg);
        assert_eq!(svg.matches(r#"<g class="lane""#).count(), 3);
        assert_eq!(svg.matches(r#"data-arm="baseline""#).count(), 1);
        assert_eq!(svg.matches(r#"data-arm="outlive""#).count(), 2);
        assert!(svg.contains(r#"width="960""#));
        // Two deaths' ✕ marks (plus the legend's), three lanes' poll dots.
        assert_eq!(
            svg.matches(&format!(r#"stroke="{DEATH}" stroke-width="2.5""#))
                .count(),
            4
        );
        assert_eq!(svg.matches("<circle").count(), 30 + 1);
        assert!(svg.contains(">40s<"), "41 s gives ticks every 5 s: {svg}");
    }

    #[test]
    fn escapes_labels() {
        let nasty = run(r#"<script>"a" & 'b'</script>"#, Arm::Baseline, 1_000);
        let odd = run("<b>odd</b>\u{1}", Arm::Outlive, 1_000);
        let svg = render(&[nasty, odd]);
        assert_well_formed(&svg);
        assert!(!svg.contains("<script>") && !svg.contains("<b>"), "{svg}");
        assert!(
            svg.contains("&lt;script&gt;&quot;a&quot; &amp; &#x27;b&#x27;&lt;/script&gt;"),
            "{svg}"
        );
        assert!(svg.contains("&lt;b&gt;odd&lt;/b&gt;\u{FFFD}"), "{svg}");
    }

    #[test]
    fn long_labels_are_cut_but_kept_whole_in_the_tooltip() {
        let label = "outlive with a very long label indeed #12";
        let svg = render(&[run(label, Arm::Outlive, 5_000)]);
        assert!(svg.contains(&format!("<title>{label}</title>")));
        assert!(svg.contains(&format!(">{}</text>", clip(label, MAX_LABEL_CHARS))));
    }

    #[test]
    fn empty_input_is_a_valid_document() {
        let svg = render(&[]);
        assert_well_formed(&svg);
        assert_eq!(svg.matches(r#"<g class="lane""#).count(), 0);
        assert!(svg.contains("no runs"));
        assert!(svg.contains(">0s<") && svg.contains(">1s<"), "{svg}");
    }

    #[test]
    fn zero_length_runs_do_not_divide_by_zero() {
        let zero = TimelineRun {
            label: "baseline #1".to_owned(),
            arm: Arm::Baseline,
            total_ms: 0,
            outcome: Outcome::Failed,
            sessions: vec![SessionSpan {
                start_ms: 0,
                end_ms: 0,
            }],
            deaths: vec![0],
            rotations: vec![0],
            standby: vec![SessionSpan {
                start_ms: 0,
                end_ms: 0,
            }],
            checkpoints: vec![],
            polls: vec![0],
        };
        let svg = render(&[zero.clone(), zero]);
        assert_well_formed(&svg);
        assert_eq!(svg.matches(r#"<g class="lane""#).count(), 2);
    }

    #[test]
    fn marks_past_the_run_stretch_the_axis_and_reversed_spans_are_drawn() {
        let mut odd = run("outlive #1", Arm::Outlive, 2_000);
        odd.polls.push(u64::MAX);
        odd.sessions.push(SessionSpan {
            start_ms: 1_500,
            end_ms: 500,
        });
        let svg = render(&[odd]);
        assert_well_formed(&svg);
        assert!(!svg.contains("width=\"-"), "{svg}");
        assert!(svg.matches("stroke-dasharray").count() <= 11, "{svg}");
    }

    #[test]
    fn ticks_are_round_and_at_most_ten() {
        for (max_ms, step) in [
            (1_000, 100),
            (1_001, 200),
            (9_000, 1_000),
            (41_000, 5_000),
            (600_000, 60_000),
        ] {
            assert_eq!(Scale { max_ms }.tick_ms(), step, "{max_ms}");
        }
        assert!(Scale { max_ms: u64::MAX }.tick_ms() > 0);
        assert_eq!(seconds(2_500, 500), "2.5s");
        assert_eq!(seconds(30_000, 5_000), "30s");
        assert_eq!(seconds(3_000, 100), "3s");
        assert_eq!(seconds(3_050, 100), "3s");
        assert_eq!(seconds(3_150, 100), "3.1s");
    }

    #[test]
    fn runs_round_trip_through_camel_case_json() {
        let original = run("outlive #1", Arm::Outlive, 1_000);
        let json = serde_json::to_string(&original).unwrap();
        assert!(
            json.contains(r#""totalMs":1000"#) && json.contains(r#""startMs":0"#),
            "{json}"
        );
        assert!(json.contains(r#""arm":"outlive""#), "{json}");
        assert!(json.contains(r#""outcome":"completed""#), "{json}");
        let back: TimelineRun = serde_json::from_str(&json).unwrap();
        assert_eq!(back, original);
    }
}

//! The pages as HTML with an inline SVG timeline: no script, no external asset. Every text
//! from a run goes through [`escape`].

use std::fmt::Write as _;

use super::timeline::{Mark, Span, Timeline};
use super::{RunView, ViewEvent};

/// Seconds between refreshes of a page whose run goes on.
const REFRESH_S: u32 = 2;
/// The SVG's size, and the axis' left and right margins.
const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 120.0;
const LEFT: f64 = 20.0;
const RIGHT: f64 = 20.0;

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #ddd}\
.session{fill:#4a7fd4;stroke:#fff;stroke-width:2}.session.cut{fill:#9db6e4}\
.bar-label{fill:#fff;font-weight:600}.redone{fill:#f2b134;opacity:.45}\
.death line,.takeover line{stroke-width:2}.death line{stroke:#c62828}.death text{fill:#c62828}\
.takeover line{stroke:#6a1b9a;stroke-dasharray:4 3}.takeover text{fill:#6a1b9a}\
.page-failure line{stroke:#ef6c00}.checkpoint{stroke:#2e7d32}.axis{stroke:#888}\
svg text{font-size:11px}.legend span{margin-right:1.2em}";

/// The page's head and opening; `live` pages refresh themselves.
fn head(out: &mut String, title: &str, live: bool) {
    let _ = write!(
        out,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title>",
        escape(title)
    );
    if live {
        let _ = write!(out, "<meta http-equiv=\"refresh\" content=\"{REFRESH_S}\">");
    }
    let _ = write!(out, "<style>{STYLE}</style></head><body>");
}

/// `/`: every run with its state, entries, sessions, time and worker.
pub(crate) fn list(runs: &[RunView], now: i64) -> String {
    let mut out = String::new();
    head(&mut out, "outlive runs", runs.iter().any(|r| !r.over));
    out.push_str("<h1>Runs</h1>");
    if runs.is_empty() {
        out.push_str("<p>No runs yet.</p></body></html>");
        return out;
    }
    out.push_str(
        "<table class=\"runs\"><tr><th>run</th><th>task</th><th>state</th><th>attempts</th>\
         <th>sessions</th><th>time</th><th>worker</th></tr>",
    );
    for run in runs {
        let totals = run.totals();
        let _ = write!(
            out,
            "<tr data-run=\"{id}\"><td><a href=\"/runs/{id}\">{id}</a></td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(run.task.as_deref().unwrap_or("")),
            escape(&run.status),
            totals.attempts,
            totals.sessions,
            seconds(duration(run, now)),
            escape(run.worker.as_deref().unwrap_or("")),
            id = escape(&run.id),
        );
    }
    out.push_str("</table></body></html>");
    out
}

/// From the first event to the last (to now while the run goes on), in milliseconds.
fn duration(run: &RunView, now: i64) -> i64 {
    let totals = run.totals();
    let first = totals.first_ms.unwrap_or(now);
    let last = match (run.over, totals.last_ms) {
        (true, Some(last)) => last,
        _ => now,
    };
    (last - first).max(0)
}

fn seconds(ms: i64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// `/runs/{id}`: the run's timeline and its events.
pub(crate) fn run(run: &RunView, now: i64) -> String {
    let mut out = String::new();
    head(&mut out, &format!("run {}", run.id), !run.over);
    let totals = run.totals();
    let _ = write!(
        out,
        "<p><a href=\"/\">all runs</a></p><h1>Run {}</h1><p class=\"summary\">{}{} · \
         {} attempts · {} sessions · {}</p>",
        escape(&run.id),
        escape(&run.status),
        run.task
            .as_deref()
            .map(|t| format!(" · task {}", escape(t)))
            .unwrap_or_default(),
        totals.attempts,
        totals.sessions,
        seconds(duration(run, now)),
    );
    if run.left_out {
        let _ = write!(
            out,
            "<p class=\"left-out\">Only its first {} events are shown: the rest were left \
             out. <code>outlive runs --history {}</code> prints them all.</p>",
            run.events.len(),
            escape(&run.id)
        );
    }
    let timeline = Timeline::of(&run.events, if run.over { i64::MIN } else { now });
    svg(&mut out, &timeline);
    out.push_str(
        "<p class=\"legend\"><span>■ session (pale: cut by its worker's end)</span>\
         <span>│ death</span><span>┆ takeover</span><span>ǀ checkpoint</span>\
         <span>▒ redone work</span></p>",
    );
    events(&mut out, &run.events);
    out.push_str("</body></html>");
    out
}

/// The timeline as an SVG: sessions as bars, redone work shaded, checkpoints as ticks,
/// deaths and takeovers as marked lines.
fn svg(out: &mut String, t: &Timeline) {
    let _ = write!(
        out,
        "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" \
         height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\">"
    );
    let Some(span) = t.span else {
        out.push_str("</svg>");
        return;
    };
    let x = |at: i64| {
        let whole = (span.to - span.from).max(1) as f64;
        LEFT + (at - span.from) as f64 / whole * (WIDTH - LEFT - RIGHT)
    };
    axis(out, span, &x);
    for s in &t.redone {
        let _ = write!(
            out,
            "<rect class=\"redone\" x=\"{:.1}\" y=\"34\" width=\"{:.1}\" height=\"36\"/>",
            x(s.from),
            (x(s.to) - x(s.from)).max(1.0)
        );
    }
    for (n, s) in t.sessions.iter().enumerate() {
        let _ = write!(
            out,
            "<rect class=\"session{}\" x=\"{:.1}\" y=\"40\" width=\"{:.1}\" height=\"24\">\
             <title>session{}: {}</title></rect>",
            if s.cut { " cut" } else { "" },
            x(s.span.from),
            (x(s.span.to) - x(s.span.from)).max(1.0),
            s.pickup
                .map(|p| format!(", pickup {p}"))
                .unwrap_or_default(),
            seconds(s.span.to - s.span.from),
        );
        let width = x(s.span.to) - x(s.span.from);
        if width > 16.0 {
            let _ = write!(
                out,
                "<text class=\"bar-label\" x=\"{:.1}\" y=\"56\">{}</text>",
                x(s.span.from) + 5.0,
                n + 1
            );
        }
    }
    for c in &t.checkpoints {
        let at = x(c.at);
        let _ = write!(
            out,
            "<line class=\"checkpoint\" x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"66\" y2=\"74\">\
             <title>checkpoint, {}</title></line>",
            escape(&c.label)
        );
    }
    marks(out, "death", &t.deaths, &x);
    marks(out, "page-failure", &t.page_failures, &x);
    marks(out, "takeover", &t.takeovers, &x);
    out.push_str("</svg>");
}

/// The axis line and a few ticks in seconds from the start.
fn axis(out: &mut String, span: Span, x: &impl Fn(i64) -> f64) {
    let _ = write!(
        out,
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"90\" y2=\"90\"/>",
        WIDTH - RIGHT
    );
    for i in 0..=5 {
        let at = span.from + (span.to - span.from) * i / 5;
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"106\" text-anchor=\"middle\">{}</text>",
            x(at),
            seconds(at - span.from)
        );
    }
}

/// One `<g class="{class}">` per mark: a line across the bars and its label.
fn marks(out: &mut String, class: &str, marks: &[Mark], x: &impl Fn(i64) -> f64) {
    for m in marks {
        let at = x(m.at);
        let _ = write!(
            out,
            "<g class=\"{class}\"><line x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"22\" y2=\"80\"/>\
             <text x=\"{at:.1}\" y=\"16\" text-anchor=\"middle\">{}</text>\
             <title>{class}: {}</title></g>",
            escape(&m.label),
            escape(&m.label)
        );
    }
}

/// The events as a table, one row each with its `seq` and `kind` as data attributes.
fn events(out: &mut String, events: &[ViewEvent]) {
    out.push_str(
        "<h2>Events</h2><table class=\"events\"><tr><th>seq</th><th>at</th><th>pickup</th>\
         <th>worker</th><th>kind</th><th>detail</th></tr>",
    );
    let first = events.first().map_or(0, |e| e.at_ms);
    for e in events {
        let _ = write!(
            out,
            "<tr data-seq=\"{}\" data-kind=\"{}\"><td>{}</td><td>+{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            e.seq,
            e.step.kind(),
            e.seq,
            seconds(e.at_ms - first),
            e.pickup.map(|p| p.to_string()).unwrap_or_default(),
            escape(e.worker.as_deref().unwrap_or("")),
            e.step.kind(),
            escape(&super::detail_text(&e.step)),
        );
    }
    out.push_str("</table>");
}

/// `text` safe inside HTML text and quoted attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use outlive::history::Step;

    use super::*;

    /// A completed run of `events`, read whole.
    fn completed(events: Vec<ViewEvent>) -> RunView {
        RunView {
            id: "r".into(),
            task: None,
            status: "completed".into(),
            over: true,
            worker: None,
            events,
            left_out: false,
            totals: None,
        }
    }

    /// Event `seq`, `seq` seconds in, of no pickup.
    fn at(seq: i64, step: Step) -> ViewEvent {
        ViewEvent {
            seq,
            at_ms: seq * 1000,
            pickup: None,
            worker: None,
            step,
        }
    }

    #[test]
    fn text_from_a_run_is_escaped() {
        let run = RunView {
            id: "<script>alert(1)</script>".into(),
            task: Some("a&b".into()),
            status: "running\"".into(),
            over: false,
            worker: Some("<w>".into()),
            events: vec![ViewEvent {
                seq: 1,
                at_ms: 1000,
                pickup: Some(1),
                worker: Some("<w>".into()),
                step: Step::Launched { took_ms: 10 },
            }],
            left_out: false,
            totals: None,
        };
        for page in [
            list(std::slice::from_ref(&run), 2000),
            super::run(&run, 2000),
        ] {
            assert!(!page.contains("<script>"), "{page}");
            assert!(!page.contains("<w>"), "{page}");
            assert!(page.contains("&lt;script&gt;"), "{page}");
            assert!(
                page.contains("http-equiv=\"refresh\""),
                "a live run refreshes"
            );
        }
    }

    #[test]
    fn a_finished_run_does_not_refresh_and_draws_its_sessions() {
        let died = Step::Died {
            attempt: 1,
            cause: "reset".into(),
            confirmed: None,
            lost_ms: 0,
            redone_ms: 300,
        };
        let run = completed(vec![
            at(1, Step::Launched { took_ms: 0 }),
            at(2, died),
            at(3, Step::Launched { took_ms: 0 }),
            at(
                4,
                Step::Finished {
                    outcome: "completed".into(),
                },
            ),
        ]);
        let page = super::run(&run, 10_000);
        assert!(!page.contains("refresh"));
        assert_eq!(page.matches("class=\"session\"").count(), 2);
        assert_eq!(page.matches("class=\"death\"").count(), 1);
        assert_eq!(page.matches("class=\"redone\"").count(), 1);
        assert_eq!(page.matches("<tr data-seq").count(), 4);
    }

    #[test]
    fn a_run_read_in_part_says_so_and_counts_from_its_totals() {
        let run = RunView {
            left_out: true,
            totals: Some(super::super::Totals {
                attempts: 7,
                sessions: 3,
                first_ms: Some(1000),
                last_ms: Some(5000),
            }),
            ..completed(vec![at(1, Step::Launched { took_ms: 0 })])
        };
        let page = super::run(&run, 10_000);
        assert!(page.contains("Only its first 1 events are shown"), "{page}");
        assert!(page.contains("7 attempts · 3 sessions · 4.0 s"), "{page}");
        let list = list(std::slice::from_ref(&run), 10_000);
        assert!(
            list.contains("<td>7</td><td>3</td><td>4.0 s</td>"),
            "{list}"
        );
    }
}

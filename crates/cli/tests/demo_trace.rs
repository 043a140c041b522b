//! `RUST_LOG=trace outlive demo` prints no secret: no session token, no session cookie, not
//! the password the task types, not the localStorage value it restores. Only their shapes
//! could tell, so the output is searched for the values' shapes and the known values.

use std::process::Command;

use regex::Regex;

#[test]
fn the_demo_at_trace_prints_no_secret() {
    let out = Command::new(env!("CARGO_BIN_EXE_outlive"))
        .args([
            "demo",
            "--lifetime",
            "4s",
            "--task",
            "9s",
            "--death",
            "close",
        ])
        .env("RUST_LOG", "trace")
        .env("NO_COLOR", "1")
        .output()
        .expect("the outlive binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the demo failed: {stdout}\n{stderr}");
    let all = format!("{stdout}\n{stderr}");
    assert!(
        all.lines().filter(|l| l.contains("outlive::wire")).count() > 100,
        "TRACE logging was on (outlive's own wire trace)"
    );
    assert!(
        all.contains("outlive run finished"),
        "the wide event was logged"
    );

    let defaults = aurora::Config::new();
    let shapes = [
        // A CDP endpoint's bearer token (the redactor turns a logged one into `token=***`).
        (
            "a session token",
            Regex::new(r"token=[A-Za-z0-9_\-]{6,}").unwrap(),
        ),
        // Aurora's session and pending-sign-in cookies carry 32 hex digits.
        (
            "a session cookie",
            Regex::new(r"aurora_(session|pending)=[0-9a-f]{16,}").unwrap(),
        ),
        (
            "a cookie value",
            Regex::new(r#""value":"[0-9a-f]{32}""#).unwrap(),
        ),
        (
            "the password",
            Regex::new(&regex::escape(defaults.password())).unwrap(),
        ),
        (
            "the localStorage value",
            Regex::new(&regex::escape(defaults.pref())).unwrap(),
        ),
    ];
    for (what, shape) in shapes {
        let hits: Vec<&str> = all.lines().filter(|l| shape.is_match(l)).collect();
        assert!(
            hits.is_empty(),
            "{what} reached {} lines; the first: {}",
            hits.len(),
            hits[0].chars().take(400).collect::<String>()
        );
    }
}

//! The book's flags reference (`docs/flags.md`) is rendered from the command line's clap
//! definitions; this test fails when the committed page is stale. Refresh it with
//! `OUTLIVE_BLESS=1 cargo test -p outlive-cli --test flags_reference`.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Arg, Command, CommandFactory};
use outlive_cli::cli::Cli;

const REFRESH: &str = "OUTLIVE_BLESS=1 cargo test -p outlive-cli --test flags_reference";

#[test]
fn the_flags_reference_is_fresh() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/flags.md");
    let rendered = render();
    if std::env::var_os("OUTLIVE_BLESS").is_some() {
        std::fs::write(&path, &rendered).expect("write docs/flags.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "docs/flags.md is stale: the command line changed. Refresh it with\n    {REFRESH}"
    );
}

/// The whole page: an introduction, then one section per subcommand.
fn render() -> String {
    let mut cli = Cli::command();
    cli.build();
    let mut page = format!(
        "# Flags reference\n\n\
         <!-- Generated from the command line's clap definitions; do not edit.\n     \
         Refresh: {REFRESH} -->\n\n\
         Every flag of every `outlive` subcommand, as `outlive SUBCOMMAND --help` prints it.\n\
         Durations are written `500ms`, `30s`, `10m`. A flag with an environment variable\n\
         takes its value from there when the flag is not given.\n\n\
         ```text\n{}\n```\n",
        cli.render_usage().to_string().trim_end()
    );
    for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
        section(&mut page, sub);
    }
    page
}

/// One subcommand: what it does, its usage, and each argument.
fn section(page: &mut String, sub: &Command) {
    let name = sub.get_bin_name().unwrap_or(sub.get_name());
    let about = sub.get_long_about().or(sub.get_about());
    let _ = write!(page, "\n## `{name}`\n\n");
    if let Some(about) = about {
        let _ = write!(page, "{}\n\n", about.to_string().trim_end());
    }
    let usage = sub.clone().render_usage().to_string();
    let _ = writeln!(page, "```text\n{}\n```\n", usage.trim_end());
    for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
        if matches!(arg.get_id().as_str(), "help" | "version") {
            continue;
        }
        item(page, arg);
    }
}

/// One argument as a list item: its spelling, its help, its default and its variable.
fn item(page: &mut String, arg: &Arg) {
    let values: Vec<String> = arg
        .get_value_names()
        .map(|names| names.iter().map(|n| format!("<{n}>")).collect())
        .unwrap_or_else(|| vec![format!("<{}>", arg.get_id().as_str().to_uppercase())]);
    let spelling = match arg.get_long() {
        Some(long) if arg.get_action().takes_values() => format!("--{long} {}", values.join(" ")),
        Some(long) => format!("--{long}"),
        None => values.join(" "),
    };
    let mut notes = Vec::new();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .filter(|v| !v.is_empty() && arg.get_action().takes_values())
        .collect();
    if !defaults.is_empty() {
        notes.push(format!("default `{}`", defaults.join(" ")));
    }
    if let Some(env) = arg.get_env() {
        notes.push(format!("from `${}`", env.to_string_lossy()));
    }
    let notes = match notes.is_empty() {
        true => String::new(),
        false => format!(" ({})", notes.join(", ")),
    };
    let help = arg.get_long_help().or(arg.get_help());
    let help = help.map(|h| h.to_string()).unwrap_or_default();
    let help: Vec<&str> = help.trim_end().lines().collect();
    let _ = write!(
        page,
        "* `{spelling}`{notes}: {}",
        help.join("\n  ").replace("\n  \n", "\n\n")
    );
    page.push('\n');
}

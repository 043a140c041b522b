//! Redaction never panics, never returns more than `MAX_LEN` characters, and `Full` mode
//! returns its input unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use outlive::Diagnostics;
use outlive::redact::{MAX_LEN, redact, redact_url};

fuzz_target!(|text: &str| {
    let safe = redact(text, Diagnostics::Safe);
    assert!(
        safe.chars().count() <= MAX_LEN,
        "{} chars",
        safe.chars().count()
    );
    let url = redact_url(text);
    assert!(
        url.chars().count() <= MAX_LEN,
        "{} chars",
        url.chars().count()
    );
    assert_eq!(redact(text, Diagnostics::Full), text);
});

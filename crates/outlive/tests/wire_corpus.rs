//! The `wire` fuzz target's seed corpus, replayed through the target's own entry point on
//! stable, as part of the test suite. Every seed (the UTF-8 frame that once panicked the relay
//! among them) is read without a panic and as serde reads it. `cargo fuzz run wire` explores
//! from these seeds (see `fuzz/README.md`).

use std::path::{Path, PathBuf};

/// The fuzz target's seeds.
fn seeds() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/wire")
}

#[test]
fn every_seed_reads_as_serde_reads_it() {
    let dir = seeds();
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 10, "the seeds are there: {seeds:?}");
    for seed in &seeds {
        let frame = std::fs::read(seed).unwrap();
        let replay = std::panic::catch_unwind(|| outlive::wire::fuzz_one(&frame));
        assert!(replay.is_ok(), "{} failed", seed.display());
    }
}

#[test]
fn the_frame_that_panicked_the_relay_reads_as_an_event() {
    // The old sniffer sliced the text after `{"method":"` at byte 40, inside a character.
    let frame = std::fs::read(seeds().join("utf8-across-byte-40")).unwrap();
    let text = std::str::from_utf8(&frame).unwrap();
    assert!(!text.is_char_boundary(r#"{"method":""#.len() + 40));
    assert_eq!(outlive::wire::reply_id(&frame), None);
    outlive::wire::fuzz_one(&frame);
}

#[test]
fn the_lone_surrogate_seed_is_mended_into_what_serde_reads() {
    let frame = std::fs::read(seeds().join("lone-surrogates")).unwrap();
    assert!(serde_json::from_slice::<serde_json::Value>(&frame).is_err());
    let mended = outlive::wire::mend_lone_surrogates(&frame).expect("two lone ones");
    let reply: serde_json::Value = serde_json::from_slice(&mended).unwrap();
    assert_eq!(
        reply["result"]["result"]["value"],
        "a\u{FFFD}b \u{1F600} \\ud800 \u{FFFD}"
    );
}

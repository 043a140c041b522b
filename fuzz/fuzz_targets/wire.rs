//! The relay's CDP sniffer never panics, and on any JSON object serde reads it reads the same
//! `id`, `method` and `sessionId` as serde, and the same kind (reply or event); mending lone
//! surrogates moves no byte and touches only frames serde refuses.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|frame: &[u8]| outlive::wire::fuzz_one(frame));

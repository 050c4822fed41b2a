//! The transcript reader: any bytes as head and tail give a row or a clear
//! refusal, never a panic; titles are short and free of control characters.
#![no_main]
use ahpd_core::transcript::{summarize, TITLE_MAX_CHARS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map(|b| *b as usize % (data.len().max(1))).unwrap_or(0);
    let (head, tail) = data.split_at(split);
    for tail in [None, Some(tail)] {
        if let Ok(s) = summarize("fuzz-session", head, tail, data.len() as u64 * 3) {
            assert!(s.title.chars().count() <= TITLE_MAX_CHARS);
            assert!(!s.title.chars().any(char::is_control));
        }
    }
});

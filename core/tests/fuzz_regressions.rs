//! Inputs the fuzzers found, frozen as tests (docs/FUZZING.md).

use ahpd_core::cursor::{decode as decode_cursor, encode, RowKey, URI_MAX_BYTES};
use ahpd_core::ids::ResourceId;
use ahpd_core::protocol::codec::decode;

/// fuzz/decode: a float in params re-encoded to text that parsed to a
/// neighbouring float (serde_json's fast float parsing was not exact).
/// Postmortem: the workspace enables serde_json's `float_roundtrip`.
#[test]
fn floats_in_params_survive_a_round_trip() {
    let text = include_str!("fixtures/fuzz/decode-float-roundtrip.json");
    let message = decode(text).expect("decodes");
    assert_eq!(decode(&message.to_json()).expect("re-decodes"), message);
}

/// fuzz/ids: `..` inside an id passed; harmless in a file name, but ids also
/// name git refs, which refuse it. Postmortem: ids follow check-ref-format
/// within a component.
#[test]
fn ids_refuse_what_git_refs_refuse() {
    assert!(ResourceId::parse("h:/izoFFFFFFFhhp-o++..es").is_err());
}

/// fuzz/cursor: a cursor for a URI longer than any valid one was refused on
/// the way back. Postmortem: the cursor bound is derived from the longest
/// valid URI, and such URIs never reach the catalogue.
#[test]
fn cursors_of_the_longest_valid_uri_round_trip() {
    let uri = format!("{}:/{}", "s".repeat(64), "a".repeat(256));
    assert_eq!(uri.len(), URI_MAX_BYTES);
    let row = RowKey { modified_ms: -795_741_901_218_893_776, uri };
    assert_eq!(decode_cursor(&encode(&row, b"k"), b"k"), Some(row));
}

//! The echo agent's transcripts (`<data-dir>/echo/<conversation-id>.json`)
//! as the offline commands see them: read in any format the agent has
//! written (`exec::echo_transcript`: JSON lines, the object, the bare
//! array of turns), written as the bare array, which every version of the
//! agent reads (the agent rewrites it in JSON lines at its next save).
//!
//! A conversation id is checked (`ids::validate_conversation_id` and
//! `fsutil::is_safe_component`) before it is joined into a path.

use std::path::{Path, PathBuf};

use ahp_types::state::Turn;
use ahpd_core::ids;

use crate::exec::{echo_transcript, fsutil};

/// The provider whose transcripts this host can read and write.
pub const ECHO_PROVIDER: &str = "echo";

/// The transcript file name of `conversation_id`, or why the id is refused.
pub fn file_name(conversation_id: &str) -> Result<String, String> {
    ids::validate_conversation_id(conversation_id)
        .map_err(|e| format!("refused conversation id {}: {e}", ids::printable(conversation_id)))?;
    if !fsutil::is_safe_component(conversation_id) {
        return Err(format!("refused conversation id {}", ids::printable(conversation_id)));
    }
    Ok(format!("{conversation_id}.json"))
}

/// The path of `conversation_id`'s transcript under `echo_dir`.
///
/// Errors: the id is refused.
pub fn path(echo_dir: &Path, conversation_id: &str) -> Result<PathBuf, String> {
    Ok(echo_dir.join(file_name(conversation_id)?))
}

/// Parses a transcript's bytes in any format the agent has written
/// (`exec::echo_transcript`).
///
/// Errors: not a transcript, or a turn that is not a turn.
pub fn parse(bytes: &[u8]) -> Result<Vec<Turn>, String> {
    echo_transcript::parse::<Turn>(bytes).map(|file| file.turns)
}

/// Reads `conversation_id`'s turns; `Ok(None)` when it has no transcript.
///
/// Errors: a refused id, or a file that cannot be read or parsed.
pub fn read(echo_dir: &Path, conversation_id: &str) -> Result<Option<Vec<Turn>>, String> {
    let path = path(echo_dir, conversation_id)?;
    match std::fs::read(&path) {
        Ok(bytes) => parse(&bytes).map(Some).map_err(|e| format!("transcript {} is unreadable: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("could not read transcript {}: {e}", path.display())),
    }
}

/// Writes `conversation_id`'s transcript durably (temp file, fsync,
/// rename, directory fsync) as a bare array of turns.
///
/// Errors: a refused id, encoding or IO.
pub fn write(echo_dir: &Path, conversation_id: &str, turns: &[Turn]) -> Result<(), String> {
    let name = file_name(conversation_id)?;
    let bytes = serde_json::to_vec(turns).map_err(|e| format!("could not encode a transcript: {e}"))?;
    fsutil::write_durable(echo_dir, &name, &bytes, None)
        .map_err(|e| format!("could not write transcript {}: {e}", echo_dir.join(&name).display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TURN: &str = r#"{"id":"t1","startedAt":"2026-01-01T00:00:00.000Z","message":{"text":"hi","origin":{"kind":"user"}},
        "responseParts":[{"kind":"markdown","id":"p","content":"Echo: hi"}],"state":"complete"}"#;

    #[test]
    fn reads_both_formats() {
        let array = format!("[{TURN}]");
        let object = format!(
            r#"{{"session":"ahp-session:/a","chat":"ahp-chat:/ahp-session@a","title":"hi",
                "createdAt":"2026-01-01T00:00:00.000Z","modifiedAt":"2026-01-01T00:00:00.000Z","turns":[{TURN}]}}"#
        );
        for text in [array, object] {
            let turns = parse(text.as_bytes()).expect("parses");
            assert_eq!(turns.len(), 1);
            assert_eq!(turns[0].id, "t1");
        }
        assert!(parse(b"").is_err());
        assert!(parse(b"{}").is_err());
        assert!(parse(br#"{"turns":3}"#).is_err());
        assert!(parse(b"\"x\"").is_err());
        assert!(parse(b"[{\"id\":1}]").is_err());
    }

    #[test]
    fn refuses_hostile_conversation_ids_and_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", "a\0b", ".hidden", "a\nb"] {
            assert!(file_name(bad).is_err(), "{bad:?}");
            assert!(write(dir.path(), bad, &[]).is_err(), "{bad:?}");
            assert!(read(dir.path(), bad).is_err(), "{bad:?}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).map(|d| d.count()).ok(), Some(0), "nothing written");
        assert_eq!(read(dir.path(), "ahp-session@a").ok(), Some(None));
        let turns = parse(format!("[{TURN}]").as_bytes()).expect("parses");
        write(dir.path(), "ahp-session@a", &turns).expect("write");
        assert_eq!(read(dir.path(), "ahp-session@a").ok(), Some(Some(turns)));
    }
}

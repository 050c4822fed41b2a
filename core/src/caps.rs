//! Size caps on what one client can make the host keep and broadcast
//! (issue 25: "a 1 MB session title is accepted, stored and broadcast"):
//! a session's title, and a message's text and attachments, wherever a
//! client can give one (`session/titleChanged`; `chat/turnStarted`,
//! `chat/draftChanged`, `chat/pendingMessageSet`; `createChat`'s
//! `initialMessage`). The frame cap (`Limits::frame_max_bytes`) bounds one
//! frame; these bound what one field may make every client and the store
//! hold, so a title or a message over its cap is refused before anything is
//! written or broadcast.
//!
//! Each check returns the refusal's words, which name the field, its size
//! and the cap with the setting that raises it: a request answers them as
//! -32602, a client action (a notification) as its echo's
//! `rejectionReason`, sent to the sender alone (docs/DECISIONS.md, 28).

use ahp_types::state::Message;

/// The default `title_max_bytes`: 1 KiB. A title is one line in a picker;
/// the host's own titles (from a first message, from a transcript) are cut
/// at 80 characters, at most 320 bytes of UTF-8, so 1 KiB leaves a client
/// room for a long title in any script and none for a document.
pub const TITLE_MAX_BYTES: usize = 1024;

/// The default `message_attachments_max_bytes`: 2 MiB of attachments per
/// message, as their JSON. An embedded screenshot (base64) of a few
/// hundred KiB fits several times over; the whole message still has to fit
/// a frame (4 MiB by default).
pub const MESSAGE_ATTACHMENTS_MAX_BYTES: usize = 2 << 20;

/// Refuses a title longer than `max` bytes (`limits.title_max_bytes`).
pub fn check_title(title: &str, max: usize) -> Result<(), String> {
    if title.len() > max {
        return Err(format!("title is {} bytes, over the limit of {max} bytes (limits.title_max_bytes)", title.len()));
    }
    Ok(())
}

/// Refuses a message whose text is over `text_max` bytes
/// (`limits.message_text_max_bytes`) or whose attachments, as JSON, are
/// over `attachments_max` bytes (`limits.message_attachments_max_bytes`).
/// `field` names the message in the refusal (`message`, `draft`,
/// `initialMessage`).
pub fn check_message(field: &str, message: &Message, text_max: usize, attachments_max: usize) -> Result<(), String> {
    let text = message.text.len();
    if text > text_max {
        return Err(format!("{field}.text is {text} bytes, over the limit of {text_max} bytes (limits.message_text_max_bytes)"));
    }
    if let Some(attachments) = message.attachments.as_ref().filter(|a| !a.is_empty()) {
        let size = encoded_len(attachments);
        if size > attachments_max {
            return Err(format!(
                "{field}.attachments are {size} bytes, over the limit of {attachments_max} bytes (limits.message_attachments_max_bytes)"
            ));
        }
    }
    Ok(())
}

/// The length of `value` as compact JSON, in bytes, counted without
/// keeping the text.
pub fn encoded_len<T: serde::Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing plain data into a counter cannot fail; a value that
    // could not be serialized counts as nothing (it was decoded from JSON).
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{MessageKind, MessageOrigin};

    fn message(text: &str, attachments: Option<serde_json::Value>) -> Message {
        Message {
            text: text.to_owned(),
            origin: MessageOrigin { kind: MessageKind::User },
            attachments: attachments.map(|a| serde_json::from_value(a).expect("attachments")),
            model: None,
            agent: None,
            meta: None,
        }
    }

    #[test]
    fn a_title_at_the_cap_passes_and_one_byte_more_is_refused_naming_field_and_cap() {
        assert!(check_title(&"t".repeat(16), 16).is_ok());
        let e = check_title(&"t".repeat(17), 16).expect_err("over");
        assert!(e.starts_with("title is 17 bytes") && e.contains("limit of 16 bytes") && e.contains("limits.title_max_bytes"), "{e}");
        // Bytes, not characters: a 6-byte "ü" string of 3 chars.
        assert!(check_title("üüü", 5).is_err());
    }

    #[test]
    fn a_message_is_refused_for_its_text_or_its_attachments() {
        assert!(check_message("message", &message("hello", None), 5, 10).is_ok());
        let e = check_message("draft", &message("hello!", None), 5, 10).expect_err("text");
        assert!(e.starts_with("draft.text is 6 bytes") && e.contains("limits.message_text_max_bytes"), "{e}");
        let big = serde_json::json!([{"type": "simple", "label": "x".repeat(64)}]);
        let e = check_message("initialMessage", &message("hi", Some(big.clone())), 5, 32).expect_err("attachments");
        assert!(e.starts_with("initialMessage.attachments are") && e.contains("limits.message_attachments_max_bytes"), "{e}");
        assert!(check_message("message", &message("hi", Some(big)), 5, 1 << 20).is_ok());
    }

    #[test]
    fn the_encoded_length_is_the_json_text_length() {
        let v = serde_json::json!({"a": [1, 2, "three"], "b": "ü"});
        assert_eq!(encoded_len(&v), serde_json::to_string(&v).expect("json").len());
    }
}

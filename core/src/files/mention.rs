//! `@`-mentions in a message being typed (issue 48, `completions` of kind
//! `userMessage`): which token the cursor is in, in the protocol's UTF-16
//! offsets, and the completion item a matched file becomes.

use ahp_types::commands::CompletionItem;
use ahp_types::state::{MessageAttachment, MessageResourceAttachment};

/// The character that starts a mention (`completionTriggerCharacters`).
pub const TRIGGER: char = '@';

/// Longest query sent to the shell's matcher, in bytes: a mention is a
/// path typed by hand, and a longer one is cut.
pub const QUERY_MAX_BYTES: usize = 256;

/// The `@token` the cursor ends: the query typed after the `@` and the
/// token's range `[start, end)` in UTF-16 code units of `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    /// What was typed after the `@` up to the cursor.
    pub query: String,
    /// Where the `@` is, in UTF-16 code units.
    pub start: i64,
    /// The cursor, in UTF-16 code units.
    pub end: i64,
}

/// The mention the cursor at `offset` (UTF-16 code units) is in: the
/// nearest `@` before it with no whitespace between, at the start of the
/// text or after whitespace (so `a@b.c`, an address, is none). `None` when
/// the cursor is in no mention, or `offset` is outside the text or splits a
/// character (answered with no items, not an error: the client asks on
/// every keystroke).
pub fn find(text: &str, offset: i64) -> Option<Mention> {
    let offset = usize::try_from(offset).ok()?;
    // The byte index of the UTF-16 offset.
    let mut units = 0usize;
    let mut cursor = None;
    for (i, c) in text.char_indices() {
        if units == offset {
            cursor = Some(i);
            break;
        }
        units += c.len_utf16();
    }
    let cursor = match cursor {
        Some(i) => i,
        None if units == offset => text.len(),
        None => return None,
    };
    let before = &text[..cursor];
    let at = before.rfind(|c: char| c == TRIGGER || c.is_whitespace())?;
    if !before[at..].starts_with(TRIGGER) {
        return None;
    }
    if before[..at].chars().next_back().is_some_and(|c| !c.is_whitespace()) {
        return None;
    }
    let mut query = before[at + TRIGGER.len_utf8()..].to_owned();
    if query.len() > QUERY_MAX_BYTES {
        let mut cut = QUERY_MAX_BYTES;
        while !query.is_char_boundary(cut) {
            cut -= 1;
        }
        query.truncate(cut);
    }
    let start = before[..at].encode_utf16().count() as i64;
    Some(Mention { query, start, end: offset as i64 })
}

/// The completion item of file `path` (a real path inside a root) for
/// `mention`: its text `@<relative path>` replaces the `@token`, and it
/// carries the protocol's resource attachment, the file's `file:` URI
/// labelled with its path relative to `root`.
pub fn item(mention: &Mention, root: &str, path: &str) -> CompletionItem {
    let relative = path.strip_prefix(root).map(|r| r.trim_start_matches('/')).filter(|r| !r.is_empty()).unwrap_or(path);
    CompletionItem {
        insert_text: format!("{TRIGGER}{relative}"),
        range_start: Some(mention.start),
        range_end: Some(mention.end),
        attachment: MessageAttachment::Resource(MessageResourceAttachment {
            label: relative.to_owned(),
            range: None,
            display_kind: Some("document".to_owned()),
            meta: None,
            uri: crate::git::uri_of_path(path),
            size_hint: None,
            content_type: None,
            nonce: None,
            selection: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_before_the_cursor() {
        assert_eq!(find("see @src/ma", 11), Some(Mention { query: "src/ma".into(), start: 4, end: 11 }));
        assert_eq!(find("@x", 2), Some(Mention { query: "x".into(), start: 0, end: 2 }));
        assert_eq!(find("@", 1), Some(Mention { query: String::new(), start: 0, end: 1 }));
        assert_eq!(find("mail a@b", 8), None);
        assert_eq!(find("see @a b", 8), None);
        assert_eq!(find("x", 5), None);
        assert_eq!(find("x", -1), None);
        // UTF-16: the emoji is two units.
        assert_eq!(find("😀 @ab", 6), Some(Mention { query: "ab".into(), start: 3, end: 6 }));
        // An offset inside a surrogate pair is none.
        assert_eq!(find("😀", 1), None);
    }
}

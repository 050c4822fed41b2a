//! A message's file attachments handed to its agent (issue 48,
//! "Attachments reach agents").
//!
//! The rule: the host reads a `file:` attachment of a message for the
//! session's agent only when the attachment's real path (links followed,
//! `..` resolved) lies inside that session's own folders
//! ([`super::reach::session_roots`]: its working directories, its own
//! worktree, the trees it shares). Those are the folders its agent works
//! in, so an attachment never hands an agent bytes from outside them,
//! whoever sent the message. A file over [`ATTACHMENT_MAX_BYTES`], a
//! folder, a missing file or one outside is not read; the agent is told
//! its name and why, in words that never say whether something exists
//! outside ([`Unread::words`]).
//!
//! The core decides what is read and where it must resolve to
//! ([`reads_for`], when the turn is handed to the agent); the shell's
//! backend resolves each path off the driver thread, admits it with
//! [`admit`] and reads it (`shell/src/exec/fs.rs`, `read_attachments`),
//! then hands the agent the content: ACP agents as resource content
//! blocks when they advertise `embeddedContext` (a resource link
//! otherwise), the `echo` agent by naming each in its reply.
//!
//! Other attachments are not files of this host and are handed on as the
//! client sent them: an embedded resource carries its own bytes; a simple
//! attachment its `modelRepresentation`; a resource attachment naming
//! another scheme, an annotations or a chat attachment is named.

use ahp_types::state::{Message, MessageAttachment};
use serde::{Deserialize, Serialize};

use crate::record::SessionRecord;

/// Largest attached file the host reads for an agent, in bytes (1 MiB):
/// an attachment is part of a prompt, and a bigger file is named instead
/// (the agent can read it with its own tools).
pub const ATTACHMENT_MAX_BYTES: u64 = 1 << 20;

/// Most attachments of one message the host reads (32); the rest are
/// named.
pub const ATTACHMENTS_READ_MAX: usize = 32;

/// What the agent's backend reads for a turn: the message's `file:`
/// attachments and the folders each must resolve inside.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentReads {
    /// The files, in the message's order (its first
    /// [`ATTACHMENTS_READ_MAX`] `file:` attachments).
    pub files: Vec<FileAttachment>,
    /// The session's folders, absolute paths as its record names them
    /// (not yet resolved: the shell resolves them with the files).
    pub roots: Vec<String>,
    /// The largest file read, in bytes ([`ATTACHMENT_MAX_BYTES`]).
    pub max_bytes: u64,
}

impl AttachmentReads {
    /// Whether there is nothing to read.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// One `file:` attachment to read (or named as not read: `refused`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileAttachment {
    /// The attachment's label (what the agent is told it is).
    pub label: String,
    /// The URI the client sent.
    pub uri: String,
    /// Its path as the URI names it ([`super::path::parse_file_uri`]),
    /// before resolution; `None` when it is not read ([`FileAttachment::refused`]).
    pub path: Option<String>,
    /// Why the core refused to have it read, if it did: not a well-formed
    /// `file:` URI of this host ([`Unread::Malformed`]) or past
    /// [`ATTACHMENTS_READ_MAX`] ([`Unread::TooMany`]).
    pub refused: Option<Unread>,
    /// The content type the client gave, if any.
    pub content_type: Option<String>,
}

/// Why an attached file was not read; the agent is told
/// ([`Unread::words`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unread {
    /// Not a well-formed `file:` URI of this host.
    Malformed,
    /// Missing, or outside the session's folders (one answer for both:
    /// the agent is not told what exists outside).
    Unavailable,
    /// A folder, or not a regular file.
    NotAFile,
    /// Over [`ATTACHMENT_MAX_BYTES`].
    TooLarge,
    /// Past [`ATTACHMENTS_READ_MAX`].
    TooMany,
    /// The filesystem failed otherwise.
    Failed,
}

impl Unread {
    /// The words the agent reads beside the attachment's name.
    pub fn words(self) -> String {
        match self {
            Unread::Malformed => "not read: not a file: URI of this host".to_owned(),
            Unread::Unavailable => "not read: no such file in this session's folders".to_owned(),
            Unread::NotAFile => "not read: not a regular file".to_owned(),
            Unread::TooLarge => format!("not read: larger than {ATTACHMENT_MAX_BYTES} bytes"),
            Unread::TooMany => format!("not read: only the first {ATTACHMENTS_READ_MAX} attached files are read"),
            Unread::Failed => "not read: the file could not be read".to_owned(),
        }
    }
}

/// What the backend reads for `message` sent to the session `record`
/// (module docs): its `Resource` attachments whose URI is `file:`, with
/// the session's folders. Empty when the message attaches no file.
pub fn reads_for(message: &Message, record: &SessionRecord) -> AttachmentReads {
    let files: Vec<FileAttachment> = message
        .attachments
        .iter()
        .flatten()
        .filter_map(|a| match a {
            MessageAttachment::Resource(r) if r.uri.starts_with("file:") => Some(r),
            _ => None,
        })
        .enumerate()
        .map(|(i, r)| {
            let (path, refused) = match super::path::parse_file_uri(&r.uri) {
                _ if i >= ATTACHMENTS_READ_MAX => (None, Some(Unread::TooMany)),
                Ok(path) => (Some(path), None),
                Err(_) => (None, Some(Unread::Malformed)),
            };
            FileAttachment { label: r.label.clone(), uri: r.uri.clone(), path, refused, content_type: r.content_type.clone() }
        })
        .collect();
    if files.is_empty() {
        return AttachmentReads::default();
    }
    AttachmentReads { files, roots: super::reach::session_roots(record), max_bytes: ATTACHMENT_MAX_BYTES }
}

/// Whether an attached file whose real path is `real` may be read, the
/// session's folders resolved to `real_roots` (the check after
/// resolution; module docs).
pub fn admit<'a>(real: &str, real_roots: impl IntoIterator<Item = &'a str>) -> bool {
    super::path::inside(real, real_roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{MessageOrigin, MessageKind, MessageResourceAttachment, SimpleMessageAttachment};

    fn resource(label: &str, uri: &str) -> MessageAttachment {
        MessageAttachment::Resource(MessageResourceAttachment {
            label: label.into(),
            range: None,
            display_kind: None,
            meta: None,
            uri: uri.into(),
            size_hint: None,
            content_type: None,
            nonce: None,
            selection: None,
        })
    }

    #[test]
    fn only_file_resources_are_read_and_within_the_sessions_folders() {
        let record: SessionRecord = serde_json::from_str(r#"{"format":1,"key":"ahp-session@k","resource":"ahp-session:/k","provider":"echo","title":"","createdAt":"2026-12-03T18:31:39.123Z","modifiedAt":"2026-12-03T18:31:40.000Z","isRead":true,"isArchived":false,"workingDirectories":["file:///w"],"config":{},"owner":null,"scope":null,"defaultChat":"ahp-chat:/ahp-session@k","chats":[],"changes":null,"git":null,"external":false}"#).expect("a record");
        let message = Message {
            text: "see".into(),
            origin: MessageOrigin { kind: MessageKind::User },
            attachments: Some(vec![
                resource("a.md", "file:///w/a.md"),
                resource("web", "https://example.com/x"),
                resource("bad", "file:///w/a%00b"),
                MessageAttachment::Simple(SimpleMessageAttachment { label: "s".into(), range: None, display_kind: None, meta: None, model_representation: Some("x".into()) }),
            ]),
            model: None,
            agent: None,
            meta: None,
        };
        let reads = reads_for(&message, &record);
        assert_eq!(reads.roots, vec!["/w".to_owned()]);
        let named: Vec<(&str, Option<&str>)> = reads.files.iter().map(|f| (f.label.as_str(), f.path.as_deref())).collect();
        assert_eq!(named, vec![("a.md", Some("/w/a.md")), ("bad", None)]);
        assert_eq!(reads.files.iter().map(|f| f.refused).collect::<Vec<_>>(), vec![None, Some(Unread::Malformed)]);
        let many = Message { attachments: Some(vec![resource("f", "file:///w/f"); ATTACHMENTS_READ_MAX + 1]), ..message.clone() };
        let reads = reads_for(&many, &record);
        assert_eq!(reads.files.iter().filter(|f| f.refused == Some(Unread::TooMany)).count(), 1, "only the files past the bound");
        assert!(admit("/w/a.md", ["/w"]));
        assert!(!admit("/wx/a.md", ["/w"]), "whole components");
        assert!(!admit("/etc/passwd", ["/w"]));
        let none = Message { attachments: None, ..message };
        assert!(reads_for(&none, &record).is_empty());
    }
}

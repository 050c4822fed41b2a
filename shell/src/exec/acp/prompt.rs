//! The content blocks of a `session/prompt` (issue 48, "Attachments reach
//! agents"): the message's text, then each attachment, in the message's
//! order.
//!
//! A file the host read for the agent (`ahpd_core::files::attachments`,
//! [`crate::exec::fs::read_attachments`]) is an embedded `resource` block
//! when the agent advertises `promptCapabilities.embeddedContext`, else a
//! `resource_link` (every ACP agent takes those; the agent can read the
//! file itself). A file the host did not read is named with why, as text.
//! The client's own attachments go on as it sent them: an embedded resource
//! as a `resource` block (a link when the agent takes no embedded
//! context), a resource of another scheme as a link, a simple attachment
//! as its `modelRepresentation`; others are named.

use agent_client_protocol::v1::schema::{
    BlobResourceContents, ContentBlock, EmbeddedResource, EmbeddedResourceResource, ResourceLink, TextContent, TextResourceContents,
};
use ahp_types::state::{Message, MessageAttachment};
use base64::Engine as _;

use crate::exec::fs::{AttachmentBody, ReadAttachment};

/// The prompt for `message`, its files read as `read` (in the order of its
/// `file:` attachments), for an agent that takes embedded context or not.
pub fn blocks(message: &Message, read: Vec<ReadAttachment>, embedded: bool) -> Vec<ContentBlock> {
    let mut out = vec![ContentBlock::Text(TextContent::new(message.text.clone()))];
    let mut read = read.into_iter();
    for attachment in message.attachments.iter().flatten() {
        let block = match attachment {
            MessageAttachment::Resource(r) if r.uri.starts_with("file:") => match read.next() {
                Some(file) => file_block(file, embedded),
                None => ContentBlock::ResourceLink(ResourceLink::new(r.label.clone(), r.uri.clone())),
            },
            MessageAttachment::Resource(r) => ContentBlock::ResourceLink(ResourceLink::new(r.label.clone(), r.uri.clone())),
            MessageAttachment::EmbeddedResource(e) if embedded => {
                let uri = format!("attachment:{}", e.label);
                let text = e
                    .content_type
                    .starts_with("text/")
                    .then(|| base64::engine::general_purpose::STANDARD.decode(&e.data).ok().and_then(|b| String::from_utf8(b).ok()))
                    .flatten();
                let resource = match text {
                    Some(text) => EmbeddedResourceResource::TextResourceContents(TextResourceContents::new(text, uri).mime_type(e.content_type.clone())),
                    None => EmbeddedResourceResource::BlobResourceContents(BlobResourceContents::new(e.data.clone(), uri).mime_type(e.content_type.clone())),
                };
                ContentBlock::Resource(EmbeddedResource::new(resource))
            }
            MessageAttachment::EmbeddedResource(e) => ContentBlock::Text(TextContent::new(format!("[attached {} ({}): not shown, this agent takes no embedded context]", e.label, e.content_type))),
            MessageAttachment::Simple(s) => ContentBlock::Text(TextContent::new(match &s.model_representation {
                Some(text) => text.clone(),
                None => format!("[attached {}]", s.label),
            })),
            MessageAttachment::Annotations(a) => ContentBlock::Text(TextContent::new(format!("[attached {}]", a.label))),
            MessageAttachment::Chat(c) => ContentBlock::Text(TextContent::new(format!("[attached {}]", c.label))),
            MessageAttachment::Unknown(_) => continue,
        };
        out.push(block);
    }
    out
}

/// One file the host read (or did not) as a block.
fn file_block(file: ReadAttachment, embedded: bool) -> ContentBlock {
    match file.body {
        AttachmentBody::Text { text, mime } if embedded => {
            ContentBlock::Resource(EmbeddedResource::new(EmbeddedResourceResource::TextResourceContents(TextResourceContents::new(text, file.uri).mime_type(mime))))
        }
        AttachmentBody::Blob { data, mime } if embedded => ContentBlock::Resource(EmbeddedResource::new(EmbeddedResourceResource::BlobResourceContents(
            BlobResourceContents::new(base64::engine::general_purpose::STANDARD.encode(data), file.uri).mime_type(mime),
        ))),
        AttachmentBody::Text { .. } | AttachmentBody::Blob { .. } => ContentBlock::ResourceLink(ResourceLink::new(file.label, file.uri)),
        AttachmentBody::Unread(why) => ContentBlock::Text(TextContent::new(format!("[attached {} ({}): {}]", file.label, file.uri, why.words()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{MessageKind, MessageOrigin, MessageResourceAttachment};
    use ahpd_core::files::attachments::Unread;

    fn file(label: &str) -> MessageAttachment {
        MessageAttachment::Resource(MessageResourceAttachment {
            label: label.into(),
            range: None,
            display_kind: None,
            meta: None,
            uri: format!("file:///w/{label}"),
            size_hint: None,
            content_type: None,
            nonce: None,
            selection: None,
        })
    }

    #[test]
    fn read_files_are_embedded_where_the_agent_takes_them_and_linked_elsewhere() {
        let message = Message {
            text: "look".into(),
            origin: MessageOrigin { kind: MessageKind::User },
            attachments: Some(vec![file("a.md"), file("gone")]),
            model: None,
            agent: None,
            meta: None,
        };
        let read = || {
            vec![
                ReadAttachment { label: "a.md".into(), uri: "file:///w/a.md".into(), body: AttachmentBody::Text { text: "hello".into(), mime: "text/plain".into() } },
                ReadAttachment { label: "gone".into(), uri: "file:///w/gone".into(), body: AttachmentBody::Unread(Unread::Unavailable) },
            ]
        };
        let json = serde_json::to_value(blocks(&message, read(), true)).unwrap_or_default();
        assert_eq!(json[0], serde_json::json!({"type": "text", "text": "look"}));
        assert_eq!(json[1], serde_json::json!({"type": "resource", "resource": {"text": "hello", "uri": "file:///w/a.md", "mimeType": "text/plain"}}));
        assert_eq!(json[2]["type"], "text");
        assert!(json[2]["text"].as_str().is_some_and(|t| t.contains("gone") && t.contains("no such file in this session's folders")), "{json}");
        let json = serde_json::to_value(blocks(&message, read(), false)).unwrap_or_default();
        assert_eq!(json[1], serde_json::json!({"type": "resource_link", "name": "a.md", "uri": "file:///w/a.md"}));
    }
}

//! A session's catalogue row encoded straight from the session, without
//! building an owned `SessionSummary` first (Sessions page, "Finding one";
//! issue 4: a 500-row `listSessions` page must cost little more than
//! encoding the rows).
//!
//! The wire shape is `ahp_types::state::SessionSummary`; these borrowed twins
//! exist only to serialize it, with the same field names, order and
//! omissions. `Session::summary` stays the one definition of what a row
//! says: the tests below require the twin's JSON text to equal the owned
//! summary's, byte for byte, for resident and non-resident sessions, with
//! and without changes, activity and the external mark.

use ahp_types::state::{ChangesSummary, ChatOrigin};
use serde::Serialize;

use super::Session;
use crate::time::Iso;

/// One catalogue row, borrowed from its session; serializes exactly as
/// `session.summary()` does.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryRow<'a> {
    provider: &'a str,
    title: &'a str,
    status: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    activity: Option<String>,
    working_directories: &'a [String],
    resource: &'a str,
    created_at: Iso,
    modified_at: Iso,
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<&'a ChangesSummary>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<ExternalMark>,
    chats: Vec<ChatRow<'a>>,
    default_chat: std::borrow::Cow<'a, str>,
}

/// One chat of a row, borrowed (`SessionChatSummary`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ChatRow<'a> {
    resource: &'a str,
    title: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<&'a ChatOrigin>,
    status: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<&'a ChangesSummary>,
}

/// `_meta: {"vscode.external": true}` of an external session's row.
#[derive(Debug, Serialize)]
struct ExternalMark {
    #[serde(rename = "vscode.external")]
    external: bool,
}

impl Session {
    /// The catalogue row as a borrowed view for encoding (see the module
    /// docs); the same row as [`Session::summary`].
    pub fn row(&self) -> SummaryRow<'_> {
        let (status, activity) = self.status();
        let chats = self
            .chat_rows()
            .map(|c| ChatRow { resource: c.resource, title: c.title, origin: c.origin, status: c.status, changes: c.changes })
            .collect();
        SummaryRow {
            provider: &self.record.provider,
            title: &self.record.title,
            status,
            activity,
            working_directories: &self.record.working_directories,
            resource: &self.record.resource,
            created_at: self.created_at().iso(),
            modified_at: self.modified_at.iso(),
            changes: self.record.changes.as_deref(),
            meta: self.record.external.then_some(ExternalMark { external: true }),
            chats,
            default_chat: self.record.default_chat(),
        }
    }
}

/// A `listSessions` result (`ListSessionsResult`) over borrowed rows.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageRef<'a> {
    /// The cursor of the next page, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// The rows, in catalogue order.
    pub items: Vec<SummaryRow<'a>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ChatRecord, SessionRecord, RECORD_FORMAT};
    use crate::session::state::{chat_state, chat_summary, session_state};
    use crate::session::{Phase, Resident};
    use crate::time::MonoTime;
    use ahp_types::state::SessionLifecycle;

    fn record(external: bool, changes: bool, chats: usize) -> SessionRecord {
        let chat = |i: usize| ChatRecord {
            resource: format!("ahp-chat:/c{i}"),
            title: format!("chat \"{i}\"\n").into(),
            conversation_id: format!("conv-{i}").into(),
            modified_at: "2026-01-02T00:00:00.000Z".into(),
            status: if i == 1 { 2 } else { 1 },
            fresh: false,
            damaged: false,
            senders: Default::default(),
            changes: (i == 1 && changes).then(|| Box::new(ChangesSummary { additions: None, deletions: None, files: Some(4) })),
            written: Default::default(),
            kept: Default::default(),
            draft: None,
            forgetting: Default::default(),
            origin: None,
            seed: Default::default(),
            queued: Default::default(),
            steering: None,
            moved: None,
        };
        SessionRecord {
            format: RECORD_FORMAT,
            key: crate::record::Derived::held("ahp-session@s"),
            resource: "ahp-session:/s".into(),
            provider: "echo".into(),
            title: "A title with \u{2028} and \"quotes\"".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            modified_at: "2026-01-03T00:00:00.250Z".into(),
            is_read: true,
            is_archived: external,
            working_directories: vec!["file:///w/a b".into()].into(),
            config: Default::default(),
            owner: None,
            scope: None,
            default_chat: crate::record::Derived::held("ahp-chat:/c0"),
            chats: (0..chats).map(chat).collect(),
            changes: changes.then(|| Box::new(ChangesSummary { additions: Some(3), deletions: Some(1), files: Some(2) })),
            git: None,
            external,
            offer: None,
            in_tree: None,
            shared_trees: Default::default(),
            deleted: false,
            tools: None,
        }
    }

    fn session(record: SessionRecord, resident: bool) -> Session {
        let resident = resident.then(|| {
            let chats: Vec<_> = record.chats.iter().map(|c| chat_state(c, Vec::new(), record.is_default_chat(&c.resource))).collect();
            Resident {
                session: session_state(&record, SessionLifecycle::Ready, chats.iter().map(chat_summary).collect()),
                chats: chats.into_iter().map(|c| (c.resource.clone(), c)).collect(),
                turn_started_mono: Default::default(),
                born_seq: 0,
            }
        });
        Session::new(record, Phase::Asleep, resident, true, MonoTime(0))
    }

    #[test]
    fn the_borrowed_row_encodes_exactly_as_the_owned_summary() {
        for external in [false, true] {
            for changes in [false, true] {
                for chats in [1, 3] {
                    for resident in [false, true] {
                        let s = session(record(external, changes, chats), resident);
                        let owned = serde_json::to_string(&s.summary()).expect("owned");
                        let borrowed = serde_json::to_string(&s.row()).expect("borrowed");
                        assert_eq!(borrowed, owned, "external={external} changes={changes} chats={chats} resident={resident}");
                    }
                }
            }
        }
    }

    /// Issue 19 (`root_rows_match_listing`): a row lists its chats in its
    /// record's order whether the state is held or not, so an eviction or
    /// a wake never reorders it (held chats were listed in URI order).
    #[test]
    fn a_rows_chats_keep_the_records_order_held_or_not() {
        let mut r = record(false, false, 3);
        // The record's order is not the URI order.
        r.chats.reverse();
        let first = r.chats[0].resource.clone();
        r.set_default_chat(first);
        let order = |s: &Session| s.summary().chats.unwrap_or_default().into_iter().map(|c| c.resource).collect::<Vec<_>>();
        let want: Vec<String> = r.chats.iter().map(|c| c.resource.clone()).collect();
        assert_eq!(order(&session(r.clone(), true)), want);
        assert_eq!(order(&session(r, false)), want);
    }

    #[test]
    fn a_borrowed_page_encodes_exactly_as_the_owned_result() {
        let a = session(record(false, true, 2), false);
        let b = session(record(true, false, 1), true);
        for next_cursor in [None, Some("opaque".to_owned())] {
            let page = PageRef { next_cursor: next_cursor.clone(), items: vec![a.row(), b.row()] };
            let owned = ahp_types::commands::ListSessionsResult { next_cursor, items: vec![a.summary(), b.summary()] };
            assert_eq!(serde_json::to_string(&page).expect("page"), serde_json::to_string(&owned).expect("owned"));
        }
    }
}

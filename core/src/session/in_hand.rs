//! What a session holds in hand, by name: the sends, waiters, queued inputs
//! and git commands the host's owners give it and take back, and the parts
//! of its record another owner keeps (its trees, its host tools, its chats'
//! list). The fields stay private to `session/`; every change from outside
//! goes through one of these, so each says what it is for.

use std::sync::Arc;

use ahp_types::state::Message;
use ahp_types::Uri;

use crate::effect::OpId;
use crate::git::{SharedTree, WorktreeRecord};
use crate::record::{ChatRecord, QueuedMessage, ScheduledWake, ToolsRecord};
use crate::session::{Parked, Phase, Queued, Session, Waiter};

/// A send held until the session's agents can take it: (chat, turn id,
/// message).
pub type HeldSend = (Uri, String, Arc<Message>);

impl Session {
    /// The agent answered the send `op`: the (chat, turn id) it carried, if
    /// it was in flight.
    pub fn send_answered(&mut self, op: OpId) -> Option<(Uri, String)> {
        self.work.sends_in_flight.remove(&op)
    }

    /// What waited on a wake or a start that will not come: the held sends
    /// and the waiters, taken to be failed.
    pub fn take_held(&mut self) -> (Vec<HeldSend>, Vec<Waiter>) {
        (std::mem::take(&mut self.work.pending_sends), std::mem::take(&mut self.work.waiters))
    }

    /// The waiters, taken to be answered or failed.
    pub fn take_waiters(&mut self) -> Vec<Waiter> {
        std::mem::take(&mut self.work.waiters)
    }

    /// Adds a waiter: a request or action that waits for the session's state.
    pub fn wait(&mut self, waiter: Waiter) {
        self.work.waiters.push(waiter);
    }

    /// Forgets the waiters `gone` picks (a connection that closed).
    pub fn forget_waiters(&mut self, gone: impl Fn(&Waiter) -> bool) {
        self.work.waiters.retain(|w| !gone(w));
    }

    /// Queues an input behind a parked write, in order.
    pub fn queue(&mut self, queued: Queued) {
        self.work.inbox.push_back(queued);
    }

    /// The next queued input, unless a write is parked (it goes first).
    pub fn next_queued(&mut self) -> Option<Queued> {
        if self.work.parked.is_some() {
            return None;
        }
        self.work.inbox.pop_front()
    }

    /// Takes the whole queue (to be put back with [`Session::requeue`]).
    pub fn take_queue(&mut self) -> std::collections::VecDeque<Queued> {
        std::mem::take(&mut self.work.inbox)
    }

    /// Puts `behind` back in front of what was queued since it was taken.
    pub fn requeue(&mut self, behind: std::collections::VecDeque<Queued>) {
        let added = std::mem::replace(&mut self.work.inbox, behind);
        self.work.inbox.extend(added);
    }

    /// The parked write whose store answer came.
    pub fn take_parked(&mut self) -> Option<Box<Parked>> {
        self.work.parked.take()
    }

    /// A git command that begins the session's tree (a cut, a restore) was
    /// sent as `op`; a later answer to an older one is stale.
    pub fn git_began(&mut self, op: OpId) {
        self.work.git_begin = Some(op);
        self.work.git_ops.insert(op);
    }

    /// Git answered `op`: whether it was the session's current begin (not
    /// stale), which is then over.
    pub fn git_answered(&mut self, op: OpId) -> bool {
        self.work.git_ops.remove(&op);
        if self.work.git_begin != Some(op) {
            return false;
        }
        self.work.git_begin = None;
        true
    }

    /// The ops a dispose waits for (its conversations, refs and trees).
    pub fn dispose_waits_for(&mut self, ops: std::collections::BTreeSet<OpId>) {
        if let Phase::Disposing(owed) = &mut self.phase {
            owed.ops = ops;
        }
    }

    /// Lets the state go (eviction); the record keeps the row.
    pub fn drop_state(&mut self) {
        self.resident = None;
    }

    /// The session's trees, as the git owner keeps them: its own tree, its
    /// former trees and the trees it was handed.
    pub fn trees_mut(&mut self) -> Trees<'_> {
        Trees(&mut self.record)
    }

    /// The session's host tools record (wakes, children, parent link),
    /// made when first needed.
    pub fn tools_or_default(&mut self) -> &mut ToolsRecord {
        self.record.tools.get_or_insert_with(Box::default)
    }

    /// The session's host tools record, when it has one.
    pub fn tools_mut(&mut self) -> Option<&mut ToolsRecord> {
        self.record.tools.as_deref_mut()
    }

    /// Takes the wake `id` off the session's list, if it is there.
    pub fn take_wake(&mut self, id: &str) -> Option<ScheduledWake> {
        let tools = self.record.tools.as_mut()?;
        let i = tools.wakes.iter().position(|w| w.id == id)?;
        Some(tools.wakes.remove(i))
    }

    /// Queues `message` on the chat's record (its pending queue); false if
    /// the session has no such chat.
    pub fn queue_message(&mut self, chat: &Uri, message: QueuedMessage) -> bool {
        let Some(record) = self.record.chats.iter_mut().find(|c| c.resource == *chat) else { return false };
        record.queued.push(message);
        true
    }

    /// Lists a chat found in the session's backend (discovery).
    pub fn join_chat(&mut self, chat: ChatRecord) {
        self.record.chats.push(chat);
    }

    /// Takes a chat off the session's list (another session holds it).
    pub fn drop_chat(&mut self, chat: &Uri) {
        self.record.chats.retain(|c| c.resource != *chat);
    }

    /// Sets the title its backend reports (discovery).
    pub fn set_title(&mut self, title: Box<str>) {
        self.record.title = title;
    }
}

/// A session's trees, changed by the git owner ([`Session::trees_mut`]).
pub struct Trees<'a>(&'a mut crate::record::SessionRecord);

impl<'a> Trees<'a> {
    /// Keeps no tree: each one was handed on or is on its way off the disk.
    pub fn let_go(&mut self) {
        self.0.shared_trees = Default::default();
        if let Some(git) = self.0.git.as_mut() {
            git.worktree = None;
            for former in &mut git.former {
                former.worktree = None;
            }
        }
    }

    /// Takes `tree` (made by another session) as one it works in.
    pub fn keep(&mut self, tree: SharedTree) {
        self.0.shared_trees.push(tree);
    }

    /// Its own or a former tree at `path`.
    pub fn at(self, path: &str) -> Option<&'a mut WorktreeRecord> {
        let git = self.0.git.as_mut()?;
        if git.worktree.as_ref().is_some_and(|w| w.path == path) {
            return git.worktree.as_mut();
        }
        git.former.iter_mut().filter_map(|f| f.worktree.as_mut()).find(|w| w.path == path)
    }

    /// Its own tree, when it has one.
    pub fn own(self) -> Option<&'a mut WorktreeRecord> {
        self.0.git.as_mut()?.worktree.as_mut()
    }
}

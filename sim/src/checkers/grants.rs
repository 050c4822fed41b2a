//! History rules of owners, scopes and grants (Sessions page, "Whose it
//! is, and what it is charged to" and "Grants"), from the world's side:
//! who each client signed in as (`users.rs`) and which reply answered
//! which frame. Independent of the core's `inv_*` rules.
//!
//! - `grants_table`: a frame the grants table refuses (a connection not
//!   signed in asks for anything but the handshake; a guest or a guest
//!   plugin asks for a write) is refused; a host with no users directory
//!   refuses nobody.
//! - `grant_refusal_changes_nothing`: a refused frame that is the step's
//!   only input (no timer was due) leaves every session's record, phase,
//!   state and LRU stamp, the catalogue and the connection's subscriptions
//!   as they were.
//! - `owner_only_dispose`: a `disposeSession` by a writer who is neither
//!   the owner nor an administrator is answered -32009 with exactly "Only
//!   the session's owner can delete it." (and changes nothing); the owner
//!   and an administrator are not refused so.
//! - `owner_never_changes`: a session's owner is the principal whose
//!   connection made it ("written when the session opens"), none on a host
//!   with no users directory, and never changes while it lives.
//! - `scope_follows_page`: its scope is the `scope` key, else the person's
//!   primary membership; none for a root connection, a plugin or a host
//!   with no users directory; a create whose scope cannot resolve makes no
//!   session.
//! - `authenticate_names_the_signer`: an answered `authenticate` makes the
//!   connection exactly the principal whose token it presented.

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::Uri;
use ahpd_core::invariants::Violation;
use ahpd_core::session::Phase;
use ahpd_core::{ConnId, Effect, HostView, Outbound};
use crate::users::Signer;
use crate::wire::Sent;

/// The exact words of an owner-only refusal (Sessions page).
pub const OWNER_ONLY: &str = "Only the session's owner can delete it.";

fn breach(rule: &'static str, detail: String) -> Violation {
    Violation { rule, detail }
}

/// One client frame, as far as these rules read it.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The connection it came on.
    pub conn: ConnId,
    /// The request id (`None` for a notification).
    pub id: Option<u64>,
    /// The method.
    pub method: String,
    /// `params.channel`.
    pub channel: String,
    /// A dispatched action's type.
    pub action: Option<String>,
    /// A dispatched action's `clientSeq`.
    pub client_seq: Option<i64>,
    /// `createSession`'s `config.scope`, when named.
    pub scope: Option<String>,
}

impl Frame {
    /// Reads a frame's text (`None` when it is not a JSON-RPC message).
    pub fn parse(conn: ConnId, text: &str) -> Option<Frame> {
        Frame::of(conn, Sent::parse(text))
    }

    /// The frame whose keys were read when it was sent (`None` when it
    /// has no method).
    pub fn of(conn: ConnId, sent: Sent) -> Option<Frame> {
        Some(Frame {
            conn,
            id: sent.id,
            method: sent.method?,
            channel: sent.channel.unwrap_or_default(),
            action: sent.action,
            client_seq: sent.client_seq,
            scope: sent.scope,
        })
    }

    /// The grants group the frame needs: `Some(false)` a read, `Some(true)`
    /// a write, `None` nothing (the handshake, `authenticate`, `ping`,
    /// `unsubscribe`) or an action outside the table.
    fn needs_write(&self) -> Option<bool> {
        match (self.method.as_str(), self.action.as_deref()) {
            ("subscribe" | "listSessions" | "fetchTurns" | "ahpd/listPeers", _) => Some(false),
            // Automations (issue 24; docs/DECISIONS.md, 25): reading the
            // catalogue is `session:list`, a run is `chat:send`.
            ("fetchAutomationRuns" | "listAutomationTriggerDefinitions", _) => Some(false),
            ("runAutomation", _) => Some(true),
            ("createSession" | "disposeSession" | "createChat" | "disposeChat" | "resolveSessionConfig" | "sessionConfigCompletions", _) => Some(true),
            // `moveChat` (issue 23): `chat:dispose` and `chat:create`.
            ("moveChat", _) => Some(true),
            // A session's files (issue 48): reading needs `session:state`,
            // changing `session:artifacts`.
            ("resourceList" | "resourceRead" | "resourceResolve" | "createResourceWatch" | "completions", _) => Some(false),
            ("resourceWrite" | "resourceMkdir" | "resourceCopy" | "resourceMove" | "resourceDelete", _) => Some(true),
            // The window's detached-tree requests (`session:worktree`).
            (m, _) if m.starts_with("vscode/") && m.contains("DetachedWorktree") => Some(true),
            ("dispatchAction", Some(t)) => match t {
                "session/titleChanged" | "session/isReadChanged" | "session/isArchivedChanged" | "session/configChanged"
                | "chat/turnStarted" | "chat/turnCancelled" | "chat/toolCallConfirmed" | "chat/draftChanged"
                | "chat/pendingMessageSet" | "chat/pendingMessageRemoved" | "chat/queuedMessagesReordered"
                | "session/workingDirectorySet" | "session/workingDirectoryRemoved" | "session/workingDirectoryReplaced" => Some(true),
                // A chat's shape (issue 23, part B): `session:mark`.
                "chat/isReadChanged" | "chat/isArchivedChanged" | "chat/truncated" => Some(true),
                // A resume sends (issue 23): `chat:send`.
                "chat/turnResume" => Some(true),
                // Automations (issue 24): `session:create`.
                "automation/createRequested" | "automation/updateRequested" | "automation/removed" => Some(true),
                // An agent's questions (issue 23): `chat:answer`.
                "chat/inputAnswerChanged" | "chat/inputCompleted" => Some(true),
                // Not an action clients may send: the host reads it as
                // needing the session's state.
                "session/ready" => Some(false),
                _ => None,
            },
            _ => None,
        }
    }
}

/// How the host answered a frame within its step.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    /// A result, or an accepted echo.
    Done,
    /// An error reply with this code and message.
    Error(i64, String),
    /// An echo with this rejection reason.
    Rejected(String),
}

fn answer_of(frame: &Frame, effects: &[Effect]) -> Option<Answer> {
    effects.iter().find_map(|e| {
        let Effect::Send { conn, message } = e else { return None };
        if *conn != frame.conn {
            return None;
        }
        match message {
            Outbound::Result { id, .. } if Some(*id) == frame.id => Some(Answer::Done),
            Outbound::Error { id: Some(id), error } if Some(*id) == frame.id => Some(Answer::Error(i64::from(error.code), error.message.clone())),
            Outbound::Action(env)
                if frame.id.is_none()
                    && env.channel == frame.channel
                    && env.origin.as_ref().is_some_and(|o| Some(o.client_seq) == frame.client_seq) =>
            {
                Some(match &env.rejection_reason {
                    Some(r) => Answer::Rejected(r.clone()),
                    None => Answer::Done,
                })
            }
            _ => None,
        }
    })
}

/// A grant refusal's words (not an owner-only or any other refusal).
fn is_grant_words(message: &str) -> bool {
    message.starts_with("permission denied: this connection") || message.starts_with("authenticate first")
}

/// What the grants table predicts for a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Predicted {
    /// Refused for want of a grant.
    Grant,
    /// A dispose refused because the caller is not the owner.
    Owner,
}

/// What the rules remember between steps.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// The host has a users directory.
    users: bool,
    /// The owner each live session was made with, by URI.
    owners: BTreeMap<Uri, Option<String>>,
    /// Each `createSession` sent, by connection and request id: the owner
    /// and the scope the session must record (`Err`: it must not exist).
    creates: BTreeMap<(ConnId, u64), (Option<String>, Result<Option<String>, ()>)>,
    /// Refusals judged (for the range run's coverage map).
    pub refusals_judged: u64,
    /// Owner-only refusals judged.
    pub owner_refusals_judged: u64,
    /// Sessions whose owner and scope were judged at creation.
    pub creations_judged: u64,
}

/// What a step's checks compare against.
#[derive(Debug, Clone, Default)]
pub struct GrantsBefore {
    frame: Option<Frame>,
    signer: Option<Signer>,
    /// The sending client's signer, signed in yet or not.
    claimed: Option<Signer>,
    predicted: Option<Predicted>,
    /// The state digest, taken only when a refusal is predicted or an
    /// owner's dispose is asked.
    digest: Option<Digest>,
    /// A timer was due this step: more than the frame ran.
    timers_due: bool,
    /// The dispose target's owner is the caller or the caller may delete
    /// anybody's session.
    may_dispose: bool,
}

/// Everything a refusal must leave alone, copied (compared by value; written
/// out only when it differs).
#[derive(Debug, Clone, PartialEq)]
pub struct Digest {
    sessions: Vec<SessionDigest>,
    catalogue: ahpd_core::catalogue::Index,
    subscriptions: Option<BTreeSet<Uri>>,
}

/// One session's part of a [`Digest`]: its record, phase, state, last use
/// and how much waits on it.
#[derive(Debug, Clone, PartialEq)]
struct SessionDigest {
    uri: Uri,
    record: ahpd_core::SessionRecord,
    phase: Phase,
    resident: Option<Box<ahpd_core::session::Resident>>,
    last_used: u64,
    waiters: usize,
    inbox: usize,
}

/// The digest of what a refused `frame` may not change: the session it
/// names (or whose chat it names), the catalogue and its connection's
/// subscriptions.
fn digest(view: &HostView<'_>, frame: &Frame) -> Digest {
    let named = if view.sessions.contains_key(&frame.channel) { Some(frame.channel.as_str()) } else { view.chats.get(&frame.channel).map(|u| &**u) };
    let conn = frame.conn;
    let sessions = named
        .and_then(|u| view.sessions.get_key_value(u))
        .into_iter()
        .map(|(u, s)| SessionDigest {
            uri: u.clone(),
            record: s.record().clone(),
            phase: s.phase().clone(),
            resident: s.resident().cloned().map(Box::new),
            last_used: s.last_used(),
            waiters: s.work().waiters.len(),
            inbox: s.work().inbox.len(),
        })
        .collect();
    Digest { sessions, catalogue: view.catalogue.clone(), subscriptions: view.conns.get(&conn).map(|c| c.subscriptions.clone()) }
}

impl Grants {
    /// The rules for a host with (`users`) or without a users directory.
    pub fn new(users: bool) -> Grants {
        Grants { users, ..Grants::default() }
    }

    /// A host (re)started: the sessions it restored are taken as they come
    /// (the store's copy is the durable one; a lost write may have been
    /// another incarnation of the URI).
    pub fn on_host_start(&mut self, view: &HostView<'_>) {
        self.owners = view.sessions.iter().map(|(u, s)| (u.clone(), s.record().owner.as_deref().map(str::to_owned))).collect();
        self.creates.clear();
    }

    /// Before `Host::handle` of one input: reads a frame and, when the
    /// table predicts a refusal, takes the digest. `signer` is the
    /// sending client's; `due` says a timer fires this step.
    pub fn before_step(&mut self, view: &HostView<'_>, frame: Option<Frame>, signer: Option<&Signer>, due: bool) -> GrantsBefore {
        let Some(frame) = frame else { return GrantsBefore::default() };
        let signed_in = view.conns.get(&frame.conn).is_some_and(|c| c.principal.is_some());
        let claimed = signer.cloned();
        let signer = signer.filter(|_| self.users && signed_in).cloned();
        if frame.method == "createSession" {
            if let Some(id) = frame.id {
                let owner = signer.as_ref().map(|s| s.owner.clone());
                let scope = match &signer {
                    Some(s) => s.scope_for(frame.scope.as_deref()),
                    None => Ok(None),
                };
                self.creates.insert((frame.conn, id), (owner, scope));
            }
        }
        let mut predicted = None;
        if self.users {
            match (frame.needs_write(), &signer) {
                (Some(_), None) => predicted = Some(Predicted::Grant),
                (Some(true), Some(s)) if !s.writes() => predicted = Some(Predicted::Grant),
                _ => {}
            }
        }
        let mut may_dispose = false;
        if self.users && predicted.is_none() && frame.method == "disposeSession" {
            if let (Some(s), Some(session)) = (&signer, view.sessions.get(&frame.channel)) {
                may_dispose = s.administrator() || session.record().owner.as_deref() == Some(s.owner.as_str());
                if !may_dispose {
                    predicted = Some(Predicted::Owner);
                }
            }
        }
        let digest = predicted.map(|_| digest(view, &frame));
        GrantsBefore { frame: Some(frame), signer, claimed, predicted, digest, timers_due: due, may_dispose }
    }

    /// After the step: the refusal (or not) of its frame, then owners and
    /// scopes of every session.
    pub fn after_step(&mut self, view: &HostView<'_>, before: &GrantsBefore, effects: &[Effect]) -> Result<(), Violation> {
        if let Some(frame) = &before.frame {
            self.check_frame(view, before, frame, effects)?;
        }
        // Owners and scopes.
        self.owners.retain(|u, _| view.sessions.contains_key(u));
        for (uri, s) in view.sessions {
            match self.owners.get(uri) {
                Some(owner) if owner.as_deref() != s.record().owner.as_deref() => {
                    return Err(breach("owner_never_changes", format!("{uri}: owner {owner:?} -> {:?}", s.record().owner)));
                }
                Some(_) => {}
                None => {
                    // A child an agent made (`start_child_session`) is
                    // owned as its parent is: `inv_child_owned_as_parent`.
                    if let Some((conn, id)) = match &s.phase() {
                        Phase::Starting(owed) => owed.client(),
                        _ => None,
                    } {
                        if let Some((owner, scope)) = self.creates.remove(&(conn, id)) {
                            self.creations_judged += 1;
                            if s.record().owner.as_deref() != owner.as_deref() {
                                return Err(breach("owner_never_changes", format!(
                                    "{uri} was made by {owner:?} and records owner {:?}", s.record().owner
                                )));
                            }
                            match scope {
                                Ok(scope) if scope.as_deref() == s.record().scope.as_deref() => {}
                                Ok(scope) => {
                                    return Err(breach("scope_follows_page", format!(
                                        "{uri} (by {owner:?}) records scope {:?}, the page says {scope:?}", s.record().scope
                                    )))
                                }
                                Err(()) => {
                                    return Err(breach("scope_follows_page", format!(
                                        "{uri} was made by {owner:?} whose scope does not resolve (records {:?})", s.record().scope
                                    )))
                                }
                            }
                        }
                    }
                    if !self.users && s.record().owner.is_some() {
                        return Err(breach("owner_never_changes", format!("{uri}: a host with no users directory recorded owner {:?}", s.record().owner)));
                    }
                    self.owners.insert(uri.clone(), s.record().owner.as_deref().map(str::to_owned));
                }
            }
        }
        Ok(())
    }

    fn check_frame(&mut self, view: &HostView<'_>, before: &GrantsBefore, frame: &Frame, effects: &[Effect]) -> Result<(), Violation> {
        // Held behind a handshake, or dropped: nothing to judge this step.
        let Some(answer) = answer_of(frame, effects) else { return Ok(()) };
        self.refusals_judged += u64::from(before.predicted.is_some());
        self.owner_refusals_judged += u64::from(before.predicted == Some(Predicted::Owner));
        let who = before.signer.as_ref().map_or("a connection not signed in".to_owned(), |s| s.owner.clone());
        let what = format!("{} {} {}", frame.method, frame.action.as_deref().unwrap_or(""), frame.channel);
        if frame.method == "authenticate" && answer == Answer::Done && self.users {
            let got = view.conns.get(&frame.conn).and_then(|c| c.principal.as_ref()).map(|p| p.owner());
            let want = before.claimed.as_ref().map(|s| s.owner.clone());
            if got != want {
                return Err(breach("authenticate_names_the_signer", format!("conn {} presented the token of {want:?} and is {got:?}", frame.conn.0)));
            }
        }
        let refused = match &answer {
            Answer::Error(-32009, m) => Some(m.clone()),
            Answer::Rejected(r) if is_grant_words(r) || r == OWNER_ONLY => Some(r.clone()),
            _ => None,
        };
        if !self.users {
            if let Some(m) = refused.filter(|m| is_grant_words(m) || m == OWNER_ONLY) {
                return Err(breach("grants_table", format!("a host with no users directory refused {what}: {m}")));
            }
            return Ok(());
        }
        match before.predicted {
            Some(Predicted::Grant) => match &answer {
                Answer::Done => return Err(breach("grants_table", format!("{who} was not refused {what}"))),
                Answer::Rejected(r) if !is_grant_words(r) => {
                    return Err(breach("grants_table", format!("{who}'s {what} was rejected for another reason first: {r}")))
                }
                Answer::Error(-32009, m) if !is_grant_words(m) => {
                    return Err(breach("grants_table", format!("{who}'s {what} was refused in other words: {m}")))
                }
                _ => {}
            },
            Some(Predicted::Owner) => match &answer {
                Answer::Error(-32009, m) if m == OWNER_ONLY => {}
                other => return Err(breach("owner_only_dispose", format!("{who} (not the owner) asked {what} and was answered {other:?}"))),
            },
            None => {
                if let Some(m) = &refused {
                    if is_grant_words(m) || (m == OWNER_ONLY && before.may_dispose) {
                        return Err(breach("grants_table", format!("{who} holds the grant for {what} and was refused: {m}")));
                    }
                }
            }
        }
        if refused.is_some() && !before.timers_due {
            // Sessions no input touched are as they were (the session table
            // reports every one handed out to change; `--verify-incremental`
            // checks it), so only the frame's own session is compared, and a
            // refusal that reached for any other fails here.
            if let Some(d) = &before.digest {
                let named: Vec<&Uri> = d.sessions.iter().map(|s| &s.uri).collect();
                if let Some(other) = view.sessions.touched().and_then(|t| t.into_iter().find(|u| !named.contains(u))) {
                    return Err(breach("grant_refusal_changes_nothing", format!("{who}'s refused {what} reached for {other}")));
                }
                let now = digest(view, frame);
                if *d != now {
                    let (d, now) = (format!("{d:?}"), format!("{now:?}"));
                    let at = d.bytes().zip(now.bytes()).position(|(a, b)| a != b).unwrap_or(0);
                    let lo = at.saturating_sub(120);
                    return Err(breach("grant_refusal_changes_nothing", format!(
                        "{who}'s refused {what} changed the host: before …{}… after …{}…",
                        d.get(lo..(at + 120).min(d.len())).unwrap_or(""),
                        now.get(lo..(at + 120).min(now.len())).unwrap_or("")
                    )));
                }
            }
        }
        Ok(())
    }
}

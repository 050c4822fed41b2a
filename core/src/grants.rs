//! Who may do what (Sessions page, "Whose it is, and what it is charged
//! to" and "Grants").
//!
//! A host with no users directory has nobody to name: it records no owner
//! and refuses nobody. With one, every command and every client-dispatched
//! action is one operation of the grants table, checked here against the
//! connection's principal before anything changes; a refusal is -32009.

use hmac::digest::Digest;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// A person's role. `member` holds both session groups (and so every chat
/// operation); `guest` holds `session:read` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read and write.
    Member,
    /// Read only: sees the sessions and the turns in them.
    Guest,
}

/// One team/project a person belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The team.
    pub team: String,
    /// The project.
    pub project: String,
    /// Whether this is the person's primary membership.
    #[serde(default)]
    pub primary: bool,
}

impl Membership {
    /// The scope string `team/project`.
    pub fn scope(&self) -> String {
        format!("{}/{}", self.team, self.project)
    }
}

/// One person in the users directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The user id (principal `user:<id>`).
    pub id: String,
    /// Lowercase hex SHA-256 of the user's token; the token itself is never
    /// stored.
    pub token_sha256: String,
    /// Member or guest.
    pub role: Role,
    /// Administrators may delete anybody's session.
    #[serde(default)]
    pub administrator: bool,
    /// Teams and projects, one primary.
    #[serde(default)]
    pub memberships: Vec<Membership>,
}

/// The users directory: who may connect, as whom.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UsersDirectory {
    /// Every user.
    pub users: Vec<User>,
    /// Every plugin: a program (not a person) that connects with its own
    /// token and acts as `plugin:<name>` (issue 7).
    #[serde(default)]
    pub plugins: Vec<Plugin>,
}

/// One plugin of the users directory: a program that drives the host on
/// nobody's behalf. It records no scope (there is no person to charge).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plugin {
    /// The plugin's name, the `<name>` of `plugin:<name>`.
    pub name: String,
    /// Lowercase hex SHA-256 of its token.
    pub token_sha256: String,
    /// What it may do: `member` (read and write sessions) or `guest`
    /// (read only), exactly as for a user.
    pub role: Role,
}

/// Compares two hex digests in time independent of where they differ.
fn same_digest(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `token` is the host's own (its SHA-256 is `host_sha256`), the
/// proof a connection is this host itself (`root:<host>`).
pub fn is_host_token(token: &str, host_sha256: &str) -> bool {
    same_digest(&token_hash(token), &host_sha256.to_ascii_lowercase())
}

/// Lowercase hex SHA-256 of `token`, the form the directory stores.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

impl UsersDirectory {
    /// The user whose token this is, comparing hashes in constant time.
    pub fn authenticate_plugin(&self, token: &str) -> Option<&Plugin> {
        let hash = token_hash(token);
        self.plugins.iter().find(|p| same_digest(&p.token_sha256, &hash))
    }

    /// The user whose token this is, if any.
    pub fn authenticate(&self, token: &str) -> Option<&User> {
        let hash = token_hash(token);
        self.users.iter().find(|u| {
            u.token_sha256.len() == hash.len()
                && u.token_sha256.bytes().zip(hash.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
        })
    }
}

/// Every operation a session or chat is put through (Sessions page,
/// "Grants"). The wire name is `Operation::name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// See the catalogue.
    SessionList,
    /// Read a session's state.
    SessionState,
    /// Start a session.
    SessionCreate,
    /// End a session.
    SessionDispose,
    /// Rename one.
    SessionRename,
    /// Change its settings.
    SessionConfigure,
    /// Add or remove a folder.
    SessionFolders,
    /// Mark it read or archived.
    SessionMark,
    /// Its worktrees.
    SessionWorktree,
    /// Its artifacts.
    SessionArtifacts,
    /// Read a chat and its turns.
    ChatTurns,
    /// Open a chat.
    ChatCreate,
    /// Close a chat.
    ChatDispose,
    /// Send a message.
    ChatSend,
    /// Cancel a turn.
    ChatCancel,
    /// Answer a question.
    ChatAnswer,
    /// Answer a tool call.
    ChatTool,
    /// Write a draft.
    ChatDraft,
    /// Rewind a chat.
    ChatTruncate,
    /// See a session's peers in its workspace (`ahpd/listPeers`; issue 10).
    SessionPeers,
}

impl Operation {
    /// The grant's name, e.g. `session:list`.
    pub fn name(self) -> &'static str {
        use Operation::*;
        match self {
            SessionList => "session:list",
            SessionState => "session:state",
            SessionCreate => "session:create",
            SessionDispose => "session:dispose",
            SessionRename => "session:rename",
            SessionConfigure => "session:configure",
            SessionFolders => "session:folders",
            SessionMark => "session:mark",
            SessionWorktree => "session:worktree",
            SessionArtifacts => "session:artifacts",
            ChatTurns => "chat:turns",
            ChatCreate => "chat:create",
            ChatDispose => "chat:dispose",
            ChatSend => "chat:send",
            ChatCancel => "chat:cancel",
            ChatAnswer => "chat:answer",
            ChatTool => "chat:tool",
            ChatDraft => "chat:draft",
            ChatTruncate => "chat:truncate",
            SessionPeers => "session:peers",
        }
    }

    /// Whether the operation is in the read group (`session:read` holds
    /// `session:list`, `session:state` and `chat:turns`); every other one is
    /// in the write group.
    pub fn is_read(self) -> bool {
        matches!(self, Operation::SessionList | Operation::SessionState | Operation::ChatTurns | Operation::SessionPeers)
    }
}

/// Who is asking, as the host knows it after `authenticate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A person who signed in.
    User {
        /// The user id.
        id: String,
        /// Their role.
        role: Role,
        /// Whether they may delete anybody's session.
        administrator: bool,
        /// Their memberships.
        memberships: Vec<Membership>,
    },
    /// This host itself: a connection that presented the host's own token
    /// (kept in the data dir, readable only by the daemon's user). Holds
    /// every grant, may delete any session, records no scope.
    Root {
        /// The host's name (`Config::host_name`).
        host: String,
    },
    /// A plugin of the users directory. Records no scope.
    Plugin {
        /// The plugin's name.
        name: String,
        /// Its role.
        role: Role,
    },
}

impl Principal {
    /// The owner string, e.g. `user:alice`.
    pub fn owner(&self) -> String {
        match self {
            Principal::User { id, .. } => format!("user:{id}"),
            Principal::Root { host } => format!("root:{host}"),
            Principal::Plugin { name, .. } => format!("plugin:{name}"),
        }
    }

    /// Whether this principal may delete anybody's session: an
    /// administrator, or the host itself.
    pub fn is_administrator(&self) -> bool {
        matches!(self, Principal::User { administrator: true, .. } | Principal::Root { .. })
    }

    /// Whether this principal holds the grant for `op`.
    pub fn holds(&self, op: Operation) -> bool {
        match self {
            Principal::User { role: Role::Member, .. } | Principal::Plugin { role: Role::Member, .. } => true,
            Principal::User { role: Role::Guest, .. } | Principal::Plugin { role: Role::Guest, .. } => op.is_read(),
            Principal::Root { .. } => true,
        }
    }
}

/// The message every refused operation carries.
pub fn refusal(op: Operation) -> String {
    format!("permission denied: this connection does not hold {}", op.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_hold_everything_and_guests_only_reading() {
        let member = Principal::User { id: "a".into(), role: Role::Member, administrator: false, memberships: vec![] };
        let guest = Principal::User { id: "b".into(), role: Role::Guest, administrator: false, memberships: vec![] };
        for op in [Operation::SessionList, Operation::SessionState, Operation::ChatTurns] {
            assert!(member.holds(op) && guest.holds(op));
        }
        for op in [Operation::SessionCreate, Operation::ChatSend, Operation::ChatTruncate, Operation::SessionMark] {
            assert!(member.holds(op));
            assert!(!guest.holds(op), "{}", op.name());
        }
    }

    #[test]
    fn tokens_are_checked_by_hash() {
        let dir = UsersDirectory {
            users: vec![User { id: "a".into(), token_sha256: token_hash("s3cret"), role: Role::Member, administrator: false, memberships: vec![] }],
            plugins: vec![Plugin { name: "p".into(), token_sha256: token_hash("plug"), role: Role::Guest }],
        };
        assert_eq!(dir.authenticate_plugin("plug").map(|p| p.name.as_str()), Some("p"));
        assert!(dir.authenticate_plugin("s3cret").is_none());
        assert!(is_host_token("host", &token_hash("host").to_ascii_uppercase()));
        assert!(!is_host_token("nothost", &token_hash("host")));
        assert_eq!(dir.authenticate("s3cret").map(|u| u.id.as_str()), Some("a"));
        assert!(dir.authenticate("wrong").is_none());
    }
}

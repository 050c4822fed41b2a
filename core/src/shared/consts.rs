//! The fixed names and words the host and a session's rules both use: the
//! `_meta` keys the host tools' state is shown under (`host/tools.rs`,
//! `host/children.rs`), the root config key (`host/discovery.rs`), and why
//! a turn is refused while the host stops (`host/agents.rs`).

/// The `_meta` key of a session's state listing its waiting wakes
/// (`[{id, chat, at, prompt}]`), and of a turn's message a tool made
/// (`{"wake": id}` or `{"from": {session, chat}}`).
pub const WAKES_META_KEY: &str = "ahpd.wakes";
/// The `_meta` key on a message a host tool made.
pub const TOOL_META_KEY: &str = "ahpd.hostTool";

/// The `_meta` key of a child's state naming its parent session.
pub const PARENT_META_KEY: &str = "ahpd.parent";
/// The `_meta` key of a parent's state listing its children's URIs.
pub const CHILDREN_META_KEY: &str = "ahpd.children";

/// The root config key.
pub const SHOW_EXTERNAL: &str = "showExternalSessions";

/// Why a turn is refused while the host stops.
pub const REFUSED_WHILE_STOPPING: &str = "the host is shutting down and takes no new turns; send it again once it is back";

//! The files commands (issue 48), each in two steps: read and checked at
//! the edge (params, `file:` URIs, grants and the roots the principal may
//! reach: [`FileWork::on_request`]), then [`FsCmd::Resolve`] of the targets
//! and the roots; the real targets are checked against the real roots and
//! only then is the command that reads or changes anything sent, naming the
//! real path checked ([`FileWork::on_done`]). A refusal says the same words
//! whether or not the path exists, and nothing is asked of the filesystem
//! past the resolve.

use std::collections::BTreeSet;

use ahp_types::commands::{
    CompletionItemKind, CompletionsParams, CompletionsResult, ContentEncoding, CreateResourceWatchParams, DirectoryEntry, ResourceCopyParams,
    ResourceDeleteParams, ResourceListParams, ResourceListResult, ResourceMkdirParams, ResourceMoveParams, ResourceReadParams, ResourceReadResult,
    ResourceRequestParams, ResourceResolveParams, ResourceResolveResult, ResourceType, ResourceWriteMode, ResourceWriteParams,
};
use ahp_types::messages::JsonRpcError;
use ahp_types::Uri;
use base64::Engine as _;
use serde_json::Value;

use super::fs::{FsCmd, FsError, FsKind, FsResult, Resolved, WriteMode};
use super::mention::Mention;
use super::path::{inside, parse_file_uri, within};
use super::reach::{may_reach, session_roots, Access};
use super::{FileWork, FilesOut};
use crate::effect::{ConnId, LogLevel, OpId};
use crate::input::Outcome;
use crate::protocol::codec::FileMethod;
use crate::protocol::error::{error, ALREADY_EXISTS, CONFLICT, INTERNAL_ERROR, INVALID_PARAMS, NOT_FOUND, PERMISSION_DENIED};

/// A files command, decoded and its paths read at the edge: what it does
/// once its paths are checked.
#[derive(Debug, Clone, PartialEq)]
pub enum FileReq {
    /// `resourceList`.
    List,
    /// `resourceRead`, with the encoding the client asked for.
    Read {
        /// `base64` or `utf-8` (`None`: the host's choice).
        encoding: Option<ContentEncoding>,
    },
    /// `resourceResolve`.
    Resolve {
        /// The URI as asked (answered back when no link was followed).
        uri: Uri,
        /// Whether a link in the last name is followed.
        follow: bool,
    },
    /// `resourceWrite`, its data decoded.
    Write {
        /// The bytes.
        data: Vec<u8>,
        /// Where they go.
        mode: WriteMode,
        /// The mode's offset, bytes.
        position: u64,
        /// Fail if it exists.
        create_only: bool,
        /// The etag it must still have.
        if_match: Option<String>,
    },
    /// `resourceMkdir`.
    Mkdir,
    /// `resourceCopy` (targets: source, destination).
    Copy {
        /// Refuse an existing destination.
        fail_if_exists: bool,
    },
    /// `resourceMove` (targets: source, destination).
    Move {
        /// Refuse an existing destination.
        fail_if_exists: bool,
    },
    /// `resourceDelete`.
    Delete {
        /// A folder's contents too.
        recursive: bool,
    },
    /// `resourceRequest`: answered from the check alone (the host grants
    /// nothing beyond its rules; asking does not widen them).
    Request,
    /// `createResourceWatch`.
    Watch {
        /// The URI as asked (the watch's `root`).
        uri: Uri,
        /// Descendants too.
        recursive: bool,
        /// As asked, echoed in the watch's state.
        excludes: Option<Value>,
        /// As asked, echoed in the watch's state.
        includes: Option<Value>,
        /// Both, read at the edge and applied to every change.
        filter: super::watch::WatchFilter,
    },
    /// `completions` of kind `userMessage` (no targets: the roots only).
    Complete {
        /// The `@token` being typed.
        mention: Mention,
    },
}

/// A request waiting on a filesystem command (`Files::pending`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pending {
    /// Who asked.
    pub(crate) conn: ConnId,
    /// The request id.
    pub(crate) id: u64,
    /// What it does.
    pub(crate) req: FileReq,
    /// The session the request's channel names, if any (marked used once
    /// answered).
    pub(crate) session: Option<Uri>,
    /// Where it is.
    pub(crate) step: Step,
}

/// Where a waiting request is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// Its targets and roots are being resolved.
    Resolving {
        /// How many of the paths asked are targets (the rest are roots).
        targets: usize,
        /// The sessions each root (in the order asked) belongs to.
        root_sessions: Vec<BTreeSet<Uri>>,
        /// What it does with the targets.
        access: Access,
        /// Whether a target outside every root may still be listed or
        /// resolved (names and kinds only) for a folder picker.
        browse: bool,
    },
    /// The command that reads or changes was sent; its answer is the
    /// reply.
    Acting,
    /// A watch being placed.
    Placing {
        /// The watch's id.
        watch: u64,
    },
    /// Completions asked over these real roots.
    Completing {
        /// The real roots (a path answered outside them is dropped).
        roots: Vec<String>,
    },
}

/// The refusal of a path outside what the connection may reach: the same
/// words whether or not it exists (issue 48: never say whether something
/// exists outside).
pub(crate) fn outside(access: Access) -> JsonRpcError {
    let verb = match access {
        Access::Read => "read",
        Access::Write => "write",
    };
    error(PERMISSION_DENIED, format!("permission denied: the path is outside the folders of the sessions this connection may {verb}"))
}

/// The protocol's error for a filesystem command's failure (after the
/// check: these may say what is there, since the path is the caller's to
/// reach).
pub(super) fn fs_error(e: &FsError, access: Access) -> JsonRpcError {
    match e {
        FsError::NotFound => error(NOT_FOUND, "not found: nothing is at that path"),
        FsError::AlreadyExists => error(ALREADY_EXISTS, "already exists: something is at that path"),
        FsError::Conflict => error(CONFLICT, "conflict: the file changed since the etag given in ifMatch was read"),
        FsError::NotADirectory => error(INVALID_PARAMS, "not a directory"),
        FsError::IsADirectory => error(INVALID_PARAMS, "is a directory: list it with resourceList"),
        FsError::NotEmpty => error(INVALID_PARAMS, "the directory is not empty: delete it with recursive: true"),
        FsError::TooLarge => error(INVALID_PARAMS, "too large: over what the host answers at once"),
        // A link swapped in between the check and the act: refused as
        // any path outside.
        FsError::Moved | FsError::Invalid => outside(access),
        FsError::Other(words) => error(INTERNAL_ERROR, format!("the filesystem refused: {words}")),
    }
}

/// A request's `file:` URI as a path, or the -32602 refusal.
fn path_of(uri: &str) -> Result<String, JsonRpcError> {
    parse_file_uri(uri).map_err(|r| {
        crate::mark!("files_uri_refused");
        error(INVALID_PARAMS, format!("{}: {}", r.words(), crate::ids::printable(uri)))
    })
}

/// What the edge read of one request: its channel, what it does, its
/// targets (absolute paths), what it does with them, whether the first
/// target's last link is followed, and whether it may browse outside
/// sessions.
struct Edge {
    channel: Uri,
    req: FileReq,
    targets: Vec<String>,
    access: Access,
    follow: bool,
    browsable: bool,
}

/// Reads a request's params (-32602 when they do not fit).
fn edge(method: FileMethod, params: Value) -> Result<Edge, JsonRpcError> {
    use crate::protocol::params as parse;
    let one = |channel: Uri, req: FileReq, uri: &str, access: Access, follow: bool, browsable: bool| -> Result<Edge, JsonRpcError> {
        Ok(Edge { channel, req, targets: vec![path_of(uri)?], access, follow, browsable })
    };
    match method {
        FileMethod::List => {
            let p: ResourceListParams = parse(params)?;
            one(p.channel, FileReq::List, &p.uri, Access::Read, true, true)
        }
        FileMethod::Read => {
            let p: ResourceReadParams = parse(params)?;
            one(p.channel, FileReq::Read { encoding: p.encoding }, &p.uri, Access::Read, true, false)
        }
        FileMethod::Resolve => {
            let p: ResourceResolveParams = parse(params)?;
            let follow = p.follow_symlinks.unwrap_or(true);
            one(p.channel, FileReq::Resolve { uri: p.uri.clone(), follow }, &p.uri, Access::Read, follow, true)
        }
        FileMethod::Write => {
            let p: ResourceWriteParams = parse(params)?;
            let data = match p.encoding {
                ContentEncoding::Utf8 => p.data.into_bytes(),
                ContentEncoding::Base64 => base64::engine::general_purpose::STANDARD
                    .decode(p.data.as_bytes())
                    .map_err(|e| error(INVALID_PARAMS, format!("data is not base64: {e}")))?,
            };
            let position = u64::try_from(p.position.unwrap_or(0)).map_err(|_| error(INVALID_PARAMS, "position must not be negative"))?;
            let mode = match p.mode.unwrap_or(ResourceWriteMode::Truncate) {
                ResourceWriteMode::Truncate => WriteMode::Truncate,
                ResourceWriteMode::Append => WriteMode::Append,
                ResourceWriteMode::Insert => WriteMode::Insert,
            };
            let req = FileReq::Write { data, mode, position, create_only: p.create_only.unwrap_or(false), if_match: p.if_match };
            one(p.channel, req, &p.uri, Access::Write, true, false)
        }
        FileMethod::Mkdir => {
            let p: ResourceMkdirParams = parse(params)?;
            one(p.channel, FileReq::Mkdir, &p.uri, Access::Write, true, false)
        }
        FileMethod::Copy => {
            let p: ResourceCopyParams = parse(params)?;
            let targets = vec![path_of(&p.source)?, path_of(&p.destination)?];
            // Links are copied as links: the source's own path is checked.
            Ok(Edge { channel: p.channel, req: FileReq::Copy { fail_if_exists: p.fail_if_exists.unwrap_or(false) }, targets, access: Access::Write, follow: false, browsable: false })
        }
        FileMethod::Move => {
            let p: ResourceMoveParams = parse(params)?;
            let targets = vec![path_of(&p.source)?, path_of(&p.destination)?];
            Ok(Edge { channel: p.channel, req: FileReq::Move { fail_if_exists: p.fail_if_exists.unwrap_or(false) }, targets, access: Access::Write, follow: false, browsable: false })
        }
        FileMethod::Delete => {
            let p: ResourceDeleteParams = parse(params)?;
            // A link is deleted, never what it points at.
            one(p.channel, FileReq::Delete { recursive: p.recursive.unwrap_or(false) }, &p.uri, Access::Write, false, false)
        }
        FileMethod::Request => {
            let p: ResourceRequestParams = parse(params)?;
            let access = if p.write == Some(true) { Access::Write } else { Access::Read };
            one(p.channel, FileReq::Request, &p.uri, access, true, false)
        }
        FileMethod::CreateWatch => {
            let p: CreateResourceWatchParams = parse(params)?;
            let filter = super::watch::WatchFilter::parse(p.excludes.as_ref(), p.includes.as_ref()).map_err(|e| error(INVALID_PARAMS, e))?;
            let req = FileReq::Watch { uri: p.uri.clone(), recursive: p.recursive.unwrap_or(false), excludes: p.excludes, includes: p.includes, filter };
            one(p.channel, req, &p.uri, Access::Read, true, false)
        }
        FileMethod::Completions => {
            let p: CompletionsParams = parse(params)?;
            if !matches!(p.kind, CompletionItemKind::UserMessage) {
                // A kind this host does not complete: no items.
                return Ok(Edge { channel: p.channel, req: FileReq::Request, targets: Vec::new(), access: Access::Read, follow: true, browsable: false });
            }
            let Some(mention) = super::mention::find(&p.text, p.offset) else {
                return Ok(Edge { channel: p.channel, req: FileReq::Request, targets: Vec::new(), access: Access::Read, follow: true, browsable: false });
            };
            Ok(Edge { channel: p.channel, req: FileReq::Complete { mention }, targets: Vec::new(), access: Access::Read, follow: true, browsable: false })
        }
    }
}

impl FileWork<'_> {
    /// A files command from `conn` (request `id`): read at the edge, then
    /// the roots the connection may reach and the resolve of targets and
    /// roots ([`FsCmd::Resolve`]); answered when the resolve is
    /// ([`FileWork::on_done`]). Refused before any effect: params that do
    /// not fit or a URI that names no absolute local path (-32602), a
    /// connection that reaches no folder and may not browse (-32009), a
    /// connection at its watch limit (-32602).
    pub(crate) fn on_request(&mut self, conn: ConnId, id: u64, method: FileMethod, params: Value) -> Vec<FilesOut> {
        let completions = method == FileMethod::Completions;
        let edge = match edge(method, params) {
            Ok(e) => e,
            Err(e) => {
                self.refuse(conn, id, e);
                return std::mem::take(&mut self.outs);
            }
        };
        let users = self.shared.config.users.is_some();
        let browse = edge.browsable && self.shared.config.files.browsing(users) && self.shared.authorize(conn, crate::grants::Operation::SessionCreate).is_ok();
        // The grant first, as every other command checks it: a principal
        // that holds no read (or, to change, no write) grant on any
        // session is refused in the grants table's words.
        if let Err(e) = self.shared.authorize(conn, edge.access.operation()) {
            if !browse {
                crate::mark!("files_refused_grant");
                self.refuse(conn, id, e);
                return std::mem::take(&mut self.outs);
            }
        }
        if completions && !matches!(edge.req, FileReq::Complete { .. }) {
            crate::mark!("files_completions_no_mention");
            self.reply(conn, id, serde_json::to_value(CompletionsResult { items: Vec::new() }).unwrap_or_default());
            return std::mem::take(&mut self.outs);
        }
        if matches!(edge.req, FileReq::Watch { .. }) {
            let max = self.shared.config.files.watches_per_conn;
            if self.state.watches.values().filter(|w| w.conn == conn).count() >= max {
                crate::mark!("files_watch_limit_refused");
                self.shared.log(LogLevel::Warn, "limit.resource_watches", None, format!("connection {} holds {max} resource watches", conn.0));
                self.refuse(conn, id, error(INVALID_PARAMS, format!("too many resource watches: a connection may hold {max}; unsubscribe from one first")));
                return std::mem::take(&mut self.outs);
            }
        }
        let (roots, root_sessions, session) = self.roots(conn, &edge.channel, edge.access);
        if roots.is_empty() && !browse {
            crate::mark!("files_refused_no_roots");
            self.refuse(conn, id, outside(edge.access));
            return std::mem::take(&mut self.outs);
        }
        let targets = edge.targets.len();
        let mut paths = edge.targets;
        paths.extend(roots);
        let step = Step::Resolving { targets, root_sessions, access: edge.access, browse };
        self.send(Pending { conn, id, req: edge.req, session, step }, FsCmd::Resolve { paths, follow: edge.follow });
        std::mem::take(&mut self.outs)
    }

    /// The roots `conn` may reach for `access` through `channel` (each
    /// once, in session order), the sessions each belongs to, and the
    /// session the channel names: a session or chat channel counts that
    /// session alone; any other channel every session
    /// ([`super::reach`]).
    fn roots(&self, conn: ConnId, channel: &str, access: Access) -> (Vec<String>, Vec<BTreeSet<Uri>>, Option<Uri>) {
        let users = self.shared.config.users.is_some();
        let principal = self.shared.conns.get(&conn).and_then(|c| c.principal.as_ref());
        let named = crate::host::session_of(self.sessions, &self.shared.chats, channel);
        let mut roots: Vec<String> = Vec::new();
        let mut sessions: Vec<BTreeSet<Uri>> = Vec::new();
        let mut add = |uri: &Uri, record: &crate::record::SessionRecord| {
            for root in session_roots(record) {
                match roots.iter().position(|r| *r == root) {
                    Some(i) => {
                        sessions[i].insert(uri.clone());
                    }
                    None => {
                        roots.push(root);
                        sessions.push([uri.clone()].into_iter().collect());
                    }
                }
            }
        };
        let counts = |s: &crate::session::Session| !matches!(s.phase(), crate::session::Phase::Disposing(_)) && may_reach(users, principal, s.record(), access);
        match &named {
            Some(uri) => {
                if let Some(s) = self.sessions.get(uri).filter(|s| counts(s)) {
                    add(uri, s.record());
                }
            }
            None => {
                for (uri, s) in self.sessions.iter() {
                    if counts(s) {
                        add(uri, s.record());
                    }
                }
            }
        }
        (roots, sessions, named)
    }

    /// A filesystem command answered (`Op::Fs` op `op`): the request it
    /// was for goes on to its next step or is answered.
    pub(crate) fn on_done(&mut self, op: OpId, outcome: Outcome) -> Vec<FilesOut> {
        let Some(pending) = self.state.pending.remove(&op) else {
            self.shared.stats.stale_ops += 1;
            return std::mem::take(&mut self.outs);
        };
        let result = match outcome {
            Outcome::Fs(r) => r,
            Outcome::Failed { message } => FsResult::Failed(FsError::Other(message)),
            other => FsResult::Failed(FsError::Other(format!("unexpected answer {other:?}"))),
        };
        let Pending { conn, id, req, session, step } = pending;
        match step {
            Step::Resolving { targets, root_sessions, access, browse } => {
                self.resolved(Pending { conn, id, req, session: session.clone(), step: Step::Acting }, targets, &root_sessions, access, browse, result);
            }
            Step::Acting => self.acted(conn, id, &req, result),
            Step::Placing { watch } => self.placed(conn, id, watch, result),
            Step::Completing { roots } => self.completed(conn, id, &req, &roots, result),
        }
        std::mem::take(&mut self.outs)
    }

    /// The resolve of a request's targets and roots answered: each real
    /// target checked against the real roots, then the command sent (or
    /// the request answered from the resolve alone).
    fn resolved(&mut self, pending: Pending, targets: usize, root_sessions: &[BTreeSet<Uri>], access: Access, browse: bool, result: FsResult) {
        let (conn, id) = (pending.conn, pending.id);
        let list = match result {
            FsResult::Resolved(list) if list.len() == targets + root_sessions.len() => list,
            FsResult::Resolved(_) => {
                self.shared.log(LogLevel::Warn, "files.resolve_mismatch", None, "the resolve answered another number of paths than asked".to_owned());
                return self.refuse(conn, id, error(INTERNAL_ERROR, "the host's filesystem answer did not fit the question"));
            }
            // A path that cannot be resolved (`..` after a missing name)
            // or a resolve the system refused: refused as outside, so the
            // answer says nothing about what is there.
            FsResult::Failed(e) => {
                crate::mark!("files_resolve_failed_refused");
                if let FsError::Other(words) = &e {
                    self.shared.log(LogLevel::Info, "files.resolve_failed", None, words.clone());
                }
                return self.refuse(conn, id, outside(access));
            }
            _ => return self.refuse(conn, id, error(INTERNAL_ERROR, "the host's filesystem answered out of turn")),
        };
        let (found, roots) = list.split_at(targets);
        let real_roots: Vec<String> = roots.iter().map(|r| r.real.clone()).collect();
        let within_roots = |t: &Resolved| inside(&t.real, real_roots.iter().map(String::as_str));
        let all_inside = found.iter().all(within_roots);
        let browsing = !all_inside && browse;
        if !all_inside && !browse {
            crate::mark!("files_refused_outside");
            return self.refuse(conn, id, outside(access));
        }
        if browsing {
            crate::mark!("files_browse_outside");
        }
        if let Some(s) = &pending.session {
            self.outs.push(FilesOut::Touch(s.clone()));
        }
        let config = &self.shared.config.files;
        let (read_max, list_max, completions_max) = (config.read_max_bytes, config.list_max_entries, config.completions_max);
        let target = found.first();
        let missing = target.is_some_and(|t| t.kind.is_none());
        let is_root = target.is_some_and(|t| real_roots.contains(&t.real));
        match (&pending.req, target) {
            (FileReq::Request, _) => {
                crate::mark!("files_request_granted");
                self.reply(conn, id, serde_json::json!({}));
            }
            (FileReq::Complete { .. }, _) => {
                let FileReq::Complete { mention } = &pending.req else { return };
                let command = FsCmd::Complete { roots: real_roots.clone(), query: mention.query.clone(), limit: completions_max };
                self.send(Pending { step: Step::Completing { roots: real_roots }, ..pending }, command);
            }
            (_, None) => self.refuse(conn, id, error(INTERNAL_ERROR, "no target")),
            (_, Some(_)) if missing && !matches!(pending.req, FileReq::Write { .. } | FileReq::Mkdir) => {
                crate::mark!("files_not_found");
                self.refuse(conn, id, error(NOT_FOUND, "not found: nothing is at that path"));
            }
            (FileReq::Resolve { uri, follow }, Some(t)) => {
                let answer = resolve_answer(uri, *follow, t, browsing);
                self.reply(conn, id, serde_json::to_value(answer).unwrap_or_default());
            }
            (FileReq::List, Some(t)) => {
                if t.kind != Some(FsKind::Directory) {
                    return self.refuse(conn, id, fs_error(&FsError::NotADirectory, access));
                }
                let command = FsCmd::List { path: t.real.clone(), max_entries: list_max };
                self.send(pending, command);
            }
            (FileReq::Read { .. }, Some(t)) => {
                if t.kind == Some(FsKind::Directory) {
                    return self.refuse(conn, id, fs_error(&FsError::IsADirectory, access));
                }
                if t.size.is_some_and(|s| s > read_max) {
                    crate::mark!("files_read_too_large");
                    return self.refuse(conn, id, error(INVALID_PARAMS, format!("too large: the file is over the {read_max} bytes resourceRead answers")));
                }
                let command = FsCmd::Read { path: t.real.clone(), max_bytes: read_max };
                self.send(pending, command);
            }
            (FileReq::Write { data, mode, position, create_only, if_match }, Some(t)) => {
                if t.kind == Some(FsKind::Directory) {
                    return self.refuse(conn, id, fs_error(&FsError::IsADirectory, access));
                }
                crate::mark!("files_write_sent");
                let command = FsCmd::Write { path: t.real.clone(), data: data.clone(), mode: *mode, position: *position, create_only: *create_only, if_match: if_match.clone() };
                self.send(pending, command);
            }
            (FileReq::Mkdir, Some(t)) => {
                let command = FsCmd::Mkdir { path: t.real.clone() };
                self.send(pending, command);
            }
            (FileReq::Copy { .. } | FileReq::Move { .. } | FileReq::Delete { .. }, Some(_)) if is_root => {
                crate::mark!("files_root_kept");
                self.refuse(conn, id, error(PERMISSION_DENIED, "permission denied: a session's own folder is not moved or deleted through the files commands"));
            }
            (FileReq::Copy { fail_if_exists } | FileReq::Move { fail_if_exists }, Some(from)) => {
                let Some(to) = found.get(1) else { return self.refuse(conn, id, error(INTERNAL_ERROR, "no destination")) };
                if within(&to.real, &from.real) && from.kind == Some(FsKind::Directory) {
                    return self.refuse(conn, id, error(INVALID_PARAMS, "the destination is inside the source"));
                }
                let (from, to, fail_if_exists) = (from.real.clone(), to.real.clone(), *fail_if_exists);
                let command = match &pending.req {
                    FileReq::Copy { .. } => FsCmd::Copy { from, to, fail_if_exists },
                    _ => FsCmd::Move { from, to, fail_if_exists },
                };
                self.send(pending, command);
            }
            (FileReq::Delete { recursive }, Some(t)) => {
                let command = FsCmd::Delete { path: t.real.clone(), recursive: *recursive };
                self.send(pending, command);
            }
            (FileReq::Watch { .. }, Some(t)) => {
                let sessions: BTreeSet<Uri> =
                    roots.iter().zip(root_sessions).filter(|(r, _)| within(&t.real, &r.real)).flat_map(|(_, s)| s.iter().cloned()).collect();
                self.place_watch(pending, t.real.clone(), real_roots, sessions);
            }
        }
    }

    /// The command that reads or changes answered: the request's reply.
    fn acted(&mut self, conn: ConnId, id: u64, req: &FileReq, result: FsResult) {
        let access = match req {
            FileReq::Write { .. } | FileReq::Mkdir | FileReq::Copy { .. } | FileReq::Move { .. } | FileReq::Delete { .. } => Access::Write,
            _ => Access::Read,
        };
        match (req, result) {
            (_, FsResult::Failed(e)) => {
                if e == FsError::Moved {
                    crate::mark!("files_moved_between_check_and_act");
                }
                if e == FsError::Conflict {
                    crate::mark!("files_write_conflict");
                }
                self.refuse(conn, id, fs_error(&e, access));
            }
            (FileReq::Read { encoding }, FsResult::Read { data, .. }) => {
                // Encoded straight into JSON text (a 10 MiB file is not
                // copied into a `Value` first: issue 48's read benchmark).
                let answer = read_answer(data, *encoding);
                match serde_json::value::to_raw_value(&answer) {
                    Ok(raw) => self.shared.send(conn, crate::effect::Outbound::Result { id, result: crate::effect::ResultBody::Encoded(raw) }),
                    Err(e) => self.refuse(conn, id, error(INTERNAL_ERROR, format!("the file could not be encoded: {e}"))),
                }
            }
            (FileReq::List, FsResult::Listed(entries)) => {
                let entries = entries
                    .into_iter()
                    .map(|(name, kind)| DirectoryEntry {
                        name,
                        r#type: match kind {
                            FsKind::Directory => "directory",
                            FsKind::Symlink => "symlink",
                            FsKind::File | FsKind::Other => "file",
                        }
                        .to_owned(),
                    })
                    .collect();
                self.reply(conn, id, serde_json::to_value(ResourceListResult { entries }).unwrap_or_default());
            }
            (_, FsResult::Done) => self.reply(conn, id, serde_json::json!({})),
            (_, other) => {
                self.shared.log(LogLevel::Warn, "files.unexpected_answer", None, format!("{other:?}"));
                self.refuse(conn, id, error(INTERNAL_ERROR, "the host's filesystem answered out of turn"));
            }
        }
    }

    /// The shell's matches answered: each file inside a real root becomes
    /// an item (a path outside every root is dropped, whatever the shell
    /// said), at most `completions_max`.
    fn completed(&mut self, conn: ConnId, id: u64, req: &FileReq, roots: &[String], result: FsResult) {
        let FileReq::Complete { mention } = req else { return };
        let paths = match result {
            FsResult::Completed(paths) => paths,
            FsResult::Failed(e) => return self.refuse(conn, id, fs_error(&e, Access::Read)),
            _ => return self.refuse(conn, id, error(INTERNAL_ERROR, "the host's filesystem answered out of turn")),
        };
        let max = self.shared.config.files.completions_max;
        let mut seen = BTreeSet::new();
        let mut items = Vec::new();
        for path in paths {
            if items.len() >= max {
                break;
            }
            let Some(root) = roots.iter().filter(|r| within(&path, r)).max_by_key(|r| r.len()) else {
                crate::mark!("files_completion_outside_dropped");
                continue;
            };
            if seen.insert(path.clone()) {
                items.push(super::mention::item(mention, root, &path));
            }
        }
        crate::mark!("files_completions_answered");
        self.reply(conn, id, serde_json::to_value(CompletionsResult { items }).unwrap_or_default());
    }
}

/// `resourceResolve`'s answer from what the resolve found. Outside every
/// root (browsing), only the kind: no size, times or etag.
fn resolve_answer(asked: &Uri, follow: bool, t: &Resolved, browsing: bool) -> ResourceResolveResult {
    let r#type = match t.kind {
        Some(FsKind::Directory) => ResourceType::Directory,
        Some(FsKind::Symlink) => ResourceType::Symlink,
        _ => ResourceType::File,
    };
    let iso = |ms: Option<i64>| ms.map(|ms| crate::time::WallTime(ms).to_iso());
    ResourceResolveResult {
        uri: if follow { crate::git::uri_of_path(&t.real) } else { asked.clone() },
        r#type,
        size: if browsing { None } else { t.size.and_then(|s| i64::try_from(s).ok()) },
        mtime: if browsing { None } else { iso(t.mtime_ms) },
        ctime: if browsing { None } else { iso(t.ctime_ms) },
        content_type: None,
        etag: if browsing { None } else { t.etag.clone() },
    }
}

/// `resourceRead`'s answer: UTF-8 text as `utf-8` unless `base64` was
/// asked; anything else as `base64`.
pub fn read_answer(data: Vec<u8>, asked: Option<ContentEncoding>) -> ResourceReadResult {
    let base64 = |data: &[u8]| ResourceReadResult {
        data: base64::engine::general_purpose::STANDARD.encode(data),
        encoding: ContentEncoding::Base64,
        content_type: None,
    };
    if asked == Some(ContentEncoding::Base64) {
        return base64(&data);
    }
    match String::from_utf8(data) {
        Ok(text) => ResourceReadResult { data: text, encoding: ContentEncoding::Utf8, content_type: None },
        Err(e) => base64(e.as_bytes()),
    }
}

//! The filesystem work a session's files need (issue 48), as data: the
//! commands the core asks of the shell ([`FsCmd`], carried by
//! [`crate::effect::Effect::Fs`]) and what the shell answers ([`FsResult`],
//! carried by [`crate::input::Outcome::Fs`]), plus the changes a watch reports
//! ([`crate::input::Input::FsChanged`]).
//!
//! Confinement is the core's: every request is answered in two steps. First
//! [`FsCmd::Resolve`] turns the paths a request names, and the roots it may
//! reach, into real paths (links followed, `..` gone); the core checks the
//! real target against the real roots; only then does it send the command
//! that reads or changes anything, naming the real path it checked. The
//! shell resolves that path again before it acts and answers
//! [`FsError::Moved`] when it no longer resolves to itself (a link swapped in
//! between the two steps), so a change made between the check and the act
//! is refused rather than followed.
//!
//! Paths are absolute, UTF-8, `/`-separated strings, as `file:` URIs decode
//! ([`crate::git::path_of_uri`]).

/// What kind of thing a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FsKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (only when links are not followed).
    Symlink,
    /// Anything else (a socket, a device, a fifo).
    Other,
}

/// One path as [`FsCmd::Resolve`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The path as asked.
    pub path: String,
    /// Its real path: links followed and `..` resolved. For a path that
    /// does not exist, the real path of its deepest existing ancestor with
    /// the missing names appended (each a plain name: a `..` or `.` after
    /// a missing name is [`FsError::Invalid`]). With `follow: false` the
    /// last name is not followed (its parent's real path with that name).
    pub real: String,
    /// What it is, when it exists.
    pub kind: Option<FsKind>,
    /// Size in bytes (files; `None` for directories and missing paths).
    pub size: Option<u64>,
    /// Last modified, milliseconds since the Unix epoch, when known.
    pub mtime_ms: Option<i64>,
    /// Created (or status changed), milliseconds since the Unix epoch, when
    /// known.
    pub ctime_ms: Option<i64>,
    /// The version token of an existing file: changes whenever its content
    /// may have (made from its size, mtime in nanoseconds and inode).
    pub etag: Option<String>,
}

/// How `resourceWrite`'s data is placed (`ResourceWriteMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Truncate at `position` bytes from the start, then write.
    Truncate,
    /// Insert `position` bytes back from the end (0: at the end).
    Append,
    /// Insert at `position` bytes from the start.
    Insert,
}

/// A filesystem command; answered by `Input::Done { op, outcome:
/// Outcome::Fs(..) }` except [`FsCmd::Unwatch`], which nothing waits on.
#[derive(Debug, Clone, PartialEq)]
pub enum FsCmd {
    /// Resolve each path ([`Resolved`], in the order asked). `follow:
    /// false` does not follow a link in the last name of the first path
    /// (the others, a request's roots, are always followed). Answered
    /// [`FsResult::Resolved`]; a path that cannot be resolved at all
    /// (its missing part holds `..`) fails the whole command
    /// ([`FsError::Invalid`]).
    Resolve {
        /// The paths: the target first, then the roots.
        paths: Vec<String>,
        /// Whether a link in the target's last name is followed.
        follow: bool,
    },
    /// Read a whole file, at most `max_bytes` (more is
    /// [`FsError::TooLarge`]). Answered [`FsResult::Read`].
    Read {
        /// Its real path, as checked.
        path: String,
        /// The most it may read, in bytes.
        max_bytes: u64,
    },
    /// Write `data` into a file, creating it (and never its parents: a
    /// missing parent is [`FsError::NotFound`]). With `create_only`, an
    /// existing file is [`FsError::AlreadyExists`]; with `if_match`, a file
    /// whose etag differs (or that does not exist) is
    /// [`FsError::Conflict`]. Answered [`FsResult::Done`].
    Write {
        /// Its real path, as checked.
        path: String,
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
    /// The names in a directory, sorted by name. A path that is not a
    /// directory is [`FsError::NotADirectory`]. Answered [`FsResult::Listed`].
    List {
        /// Its real path, as checked.
        path: String,
        /// The most entries to answer; more is [`FsError::TooLarge`].
        max_entries: usize,
    },
    /// `mkdir -p`; an existing non-directory is [`FsError::AlreadyExists`].
    /// Answered [`FsResult::Done`].
    Mkdir {
        /// Its real path, as checked.
        path: String,
    },
    /// Copy a file or a directory tree (links copied as links). Answered
    /// [`FsResult::Done`].
    Copy {
        /// The source's real path, as checked.
        from: String,
        /// The destination's real path, as checked.
        to: String,
        /// An existing destination is [`FsError::AlreadyExists`] (else it is
        /// replaced).
        fail_if_exists: bool,
    },
    /// Rename (a copy and delete across filesystems). Answered
    /// [`FsResult::Done`].
    Move {
        /// The source's real path, as checked.
        from: String,
        /// The destination's real path, as checked.
        to: String,
        /// An existing destination is [`FsError::AlreadyExists`] (else it is
        /// replaced).
        fail_if_exists: bool,
    },
    /// Delete a file, a link (never what it points at) or a directory (a
    /// non-empty one only with `recursive`, else [`FsError::NotEmpty`]).
    /// Answered [`FsResult::Done`].
    Delete {
        /// Its real path (a link's own path), as checked.
        path: String,
        /// Delete a directory's contents too.
        recursive: bool,
    },
    /// Start watching `path` (and, with `recursive`, everything under it);
    /// changes arrive as `Input::FsChanged { watch, .. }`, batched. Answered
    /// [`FsResult::Done`] once the watch is in place.
    Watch {
        /// The watch's id, the core's.
        watch: u64,
        /// Its real path, as checked.
        path: String,
        /// Whether descendants are reported.
        recursive: bool,
    },
    /// Stop the watch; nothing answers.
    Unwatch {
        /// The watch's id.
        watch: u64,
    },
    /// Files under `roots` whose path relative to their root matches
    /// `query` fuzzily, best first, at most `limit`; `.gitignore` (and
    /// `.ignore`, hidden files) honoured. Answered [`FsResult::Completed`].
    Complete {
        /// The real roots, as checked.
        roots: Vec<String>,
        /// What was typed after the trigger character.
        query: String,
        /// The most to answer.
        limit: usize,
    },
}

/// A filesystem command's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum FsResult {
    /// [`FsCmd::Resolve`]'s answer, one per path asked.
    Resolved(Vec<Resolved>),
    /// [`FsCmd::Read`]'s answer.
    Read {
        /// The file's bytes.
        data: Vec<u8>,
        /// Its etag when read.
        etag: String,
    },
    /// [`FsCmd::List`]'s answer: (name, kind) sorted by name.
    Listed(Vec<(String, FsKind)>),
    /// [`FsCmd::Complete`]'s answer: real paths, best first.
    Completed(Vec<String>),
    /// A command that answers nothing more succeeded.
    Done,
    /// It failed.
    Failed(FsError),
}

/// Why a filesystem command failed; each maps to the protocol's code
/// (`crate::files` does the mapping).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsError {
    /// Nothing is there (`NotFound`, -32008).
    NotFound,
    /// Something is already there (`AlreadyExists`, -32010).
    AlreadyExists,
    /// The etag differs (`Conflict`, -32011).
    Conflict,
    /// Not a directory where one was needed.
    NotADirectory,
    /// A directory where a file was needed.
    IsADirectory,
    /// A directory that is not empty, deleted without `recursive`.
    NotEmpty,
    /// Bigger than the command allows.
    TooLarge,
    /// The path resolved elsewhere when acted on than when checked.
    Moved,
    /// A path that cannot be resolved (`..` after a missing name, NUL, not
    /// absolute).
    Invalid,
    /// The operating system refused it (permissions, I/O); words a person
    /// can act on, never file contents.
    Other(String),
}

//! File reads and writes an ACP agent asks of the host (`fs/read_text_file`,
//! `fs/write_text_file`), confined to the chat's working directory, each
//! write told to the core (the session's claims, issue 10).
//!
//! A path is inside the root when its canonical form is (symlinks resolved):
//! a read resolves the file itself; a write resolves its parent folder (the
//! file may not exist yet) and, when the file exists, the file too, so a
//! symlink inside the root cannot point a write outside it. Relative paths
//! are refused (ACP requires absolute paths).

use std::path::{Component, Path, PathBuf};

use ahp_types::Uri;

/// Why a file request of an agent was not done; each kind is answered with
/// its own ACP error, so an agent can tell a file that is not there (which
/// it may go on to create: Gemini CLI reads a file before it writes it)
/// from a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsError {
    /// The file (or, for a write, its folder) does not exist, inside the
    /// root: ACP `resource_not_found` (-32002).
    NotFound(String),
    /// The path is refused: not absolute, naming `..`, or outside the root
    /// (whether or not it exists there is not said): ACP `invalid_params`.
    Refused(String),
    /// The read or write itself failed (permissions, not UTF-8, a full
    /// disk): ACP `internal_error`.
    Failed(String),
}

impl FsError {
    /// What happened, for the agent and the log.
    pub fn message(&self) -> &str {
        match self {
            FsError::NotFound(m) | FsError::Refused(m) | FsError::Failed(m) => m,
        }
    }

    fn of_io(path: &Path, e: &std::io::Error) -> FsError {
        let message = format!("{}: {e}", path.display());
        if e.kind() == std::io::ErrorKind::NotFound {
            FsError::NotFound(message)
        } else {
            FsError::Failed(message)
        }
    }
}

/// Where each write of a chat's agent is told: to the core, as
/// `BackendEvent::Wrote`, the session's claim for workspace awareness
/// (issue 10). Shared by every chat of the backend.
#[derive(Clone)]
pub struct Written(crate::events::EventSink);

impl Written {
    /// Tells `events` of every write.
    pub fn reporting_to(events: crate::events::EventSink) -> Written {
        Written(events)
    }

    fn record(&self, chat: &str, path: &Path) {
        let event = ahpd_core::BackendEvent::Wrote { paths: vec![path.display().to_string()] };
        self.0.input(ahpd_core::Input::Backend { chat: chat.to_owned(), event });
    }
}

/// One chat's view of the file system: its root, and where its writes are
/// told.
#[derive(Clone)]
pub struct Confined {
    chat: Uri,
    root: PathBuf,
    written: Written,
}

impl Confined {
    /// Confines `chat`'s agent to `root` (canonicalized here).
    ///
    /// Errors: `root` does not exist or cannot be resolved.
    pub fn new(chat: Uri, root: &Path, written: Written) -> Result<Confined, String> {
        let root = std::fs::canonicalize(root).map_err(|e| format!("working directory {}: {e}", root.display()))?;
        Ok(Confined { chat, root, written })
    }

    /// Reads a text file inside the root; `line` (1-based) and `limit`
    /// (lines) select part of it.
    ///
    /// Errors: outside the root, missing, unreadable or not UTF-8.
    pub async fn read(&self, path: &Path, line: Option<u32>, limit: Option<u32>) -> Result<String, FsError> {
        let target = self.resolve_existing(path)?;
        let text = tokio::fs::read_to_string(&target).await.map_err(|e| FsError::of_io(path, &e))?;
        if line.is_none() && limit.is_none() {
            return Ok(text);
        }
        let skip = line.map(|l| l.saturating_sub(1) as usize).unwrap_or(0);
        let take = limit.map(|l| l as usize).unwrap_or(usize::MAX);
        Ok(text.split_inclusive('\n').skip(skip).take(take).collect())
    }

    /// Writes (creates or replaces) a text file inside the root and tells
    /// the core the path.
    ///
    /// Errors: outside the root, its folder missing, or the write failed.
    pub async fn write(&self, path: &Path, content: &str) -> Result<(), FsError> {
        let target = self.resolve_for_write(path)?;
        tokio::fs::write(&target, content.as_bytes()).await.map_err(|e| FsError::of_io(path, &e))?;
        tracing::info!(chat = %self.chat, path = %target.display(), bytes = content.len(), "acp.fs.write: the agent wrote a file");
        self.written.record(&self.chat, &target);
        Ok(())
    }

    fn inside(&self, resolved: &Path, asked: &Path) -> Result<(), FsError> {
        if resolved.starts_with(&self.root) {
            Ok(())
        } else {
            Err(FsError::Refused(format!("{} is outside the session's working directory {}", asked.display(), self.root.display())))
        }
    }

    fn absolute<'p>(&self, path: &'p Path) -> Result<&'p Path, FsError> {
        if !path.is_absolute() {
            return Err(FsError::Refused(format!("{} is not an absolute path", path.display())));
        }
        if path.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(FsError::Refused(format!("{} names a parent folder (..)", path.display())));
        }
        Ok(path)
    }

    fn resolve_existing(&self, path: &Path) -> Result<PathBuf, FsError> {
        let path = self.absolute(path)?;
        match std::fs::canonicalize(path) {
            Ok(resolved) => {
                self.inside(&resolved, path)?;
                Ok(resolved)
            }
            // Missing: "not found" only inside the root (its folder must
            // resolve inside); outside, the same refusal as an existing
            // file there gets, so nothing outside is told.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.resolve_for_write(path)?;
                Err(FsError::of_io(path, &e))
            }
            Err(e) => Err(FsError::of_io(path, &e)),
        }
    }

    fn resolve_for_write(&self, path: &Path) -> Result<PathBuf, FsError> {
        let path = self.absolute(path)?;
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(FsError::Refused(format!("{} names no file", path.display())));
        };
        let parent = self.resolve_folder(parent, path)?;
        self.inside(&parent, path)?;
        let target = parent.join(name);
        if let Ok(resolved) = std::fs::canonicalize(&target) {
            self.inside(&resolved, path)?;
            return Ok(resolved);
        }
        Ok(target)
    }

    /// `folder` canonicalized; a missing one is "not found" when the
    /// nearest folder above it that exists is inside the root, else refused.
    fn resolve_folder(&self, folder: &Path, asked: &Path) -> Result<PathBuf, FsError> {
        match std::fs::canonicalize(folder) {
            Ok(resolved) => Ok(resolved),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let existing = folder.ancestors().skip(1).find_map(|a| std::fs::canonicalize(a).ok());
                match existing {
                    Some(above) => self.inside(&above, asked).and(Err(FsError::of_io(folder, &e))),
                    None => Err(FsError::of_io(folder, &e)),
                }
            }
            Err(e) => Err(FsError::of_io(folder, &e)),
        }
    }
}

/// The local path of a `file:` URI (percent-escapes decoded), or `None` for
/// another scheme or a remote host.
pub fn path_of_file_uri(uri: &str) -> Option<PathBuf> {
    ahpd_core::git::path_of_uri(uri).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris() {
        assert_eq!(path_of_file_uri("file:///tmp/a%20b"), Some(PathBuf::from("/tmp/a b")));
        assert_eq!(path_of_file_uri("file://localhost/x"), Some(PathBuf::from("/x")));
        assert_eq!(path_of_file_uri("file:///x%2"), Some(PathBuf::from("/x%2")));
        assert_eq!(path_of_file_uri("file://host/x"), None);
        assert_eq!(path_of_file_uri("https://x/y"), None);
    }

    #[tokio::test]
    async fn reads_and_writes_stay_inside_the_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::write(tmp.path().join("secret"), "no").expect("write");
        std::fs::write(root.join("a.txt"), "1\n2\n3\n").expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink(tmp.path().join("secret"), root.join("link")).expect("symlink");
        let (events, mut told) = crate::events::EventSink::channel();
        let fs = Confined::new("ahp-chat:/c".to_owned(), &root, Written::reporting_to(events)).expect("root");
        let root = std::fs::canonicalize(&root).expect("canon");

        assert_eq!(fs.read(&root.join("a.txt"), None, None).await.unwrap(), "1\n2\n3\n");
        assert_eq!(fs.read(&root.join("a.txt"), Some(2), Some(1)).await.unwrap(), "2\n");
        assert!(fs.read(&tmp.path().join("secret"), None, None).await.unwrap_err().message().contains("outside"));
        assert!(fs.read(&root.join("../secret"), None, None).await.is_err());
        assert!(fs.read(Path::new("a.txt"), None, None).await.unwrap_err().message().contains("absolute"));
        #[cfg(unix)]
        {
            assert!(fs.read(&root.join("link"), None, None).await.unwrap_err().message().contains("outside"));
            assert!(fs.write(&root.join("link"), "x").await.unwrap_err().message().contains("outside"));
        }
        assert!(fs.write(&tmp.path().join("out.txt"), "x").await.is_err());
        // A file that is not there: "not found" inside the root (an agent
        // may go on to create it), a refusal outside it, existing or not.
        assert!(matches!(fs.read(&root.join("nope.txt"), None, None).await, Err(FsError::NotFound(_))));
        assert!(matches!(fs.write(&root.join("no/such/dir.txt"), "x").await, Err(FsError::NotFound(_))));
        assert!(matches!(fs.read(&tmp.path().join("nope.txt"), None, None).await, Err(FsError::Refused(_))));
        assert!(matches!(fs.read(&tmp.path().join("secret"), None, None).await, Err(FsError::Refused(_))));
        fs.write(&root.join("new.txt"), "hello").await.expect("write inside");
        assert_eq!(std::fs::read_to_string(root.join("new.txt")).unwrap(), "hello");
        assert_eq!(std::fs::read_to_string(tmp.path().join("secret")).unwrap(), "no");
        // The one write that happened is told, as the chat's, and nothing
        // else.
        let mut writes = Vec::new();
        while let Ok(event) = told.try_recv() {
            match event {
                crate::events::Event::Input(ahpd_core::Input::Backend { chat, event: ahpd_core::BackendEvent::Wrote { paths } }) => writes.push((chat, paths)),
                other => panic!("only writes are told: {other:?}"),
            }
        }
        assert_eq!(writes, vec![("ahp-chat:/c".to_owned(), vec![root.join("new.txt").display().to_string()])]);
    }
}

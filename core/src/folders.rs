//! A session's working directories (issue 9; docs/REFERENCE-NOTES.md, AHP 6,
//! `session/workingDirectory*`): the first is the process root, the folder
//! the agent's process runs in, and can only be replaced
//! (`session/workingDirectoryReplaced`), never removed; the rest are peers,
//! added and removed freely, and only on a backend that can take them
//! (`AgentSpec::peer_directories`, advertised as
//! `capabilities.multipleWorkingDirectories` with `primaryReplacement`). A
//! backend that cannot take peers is told none. The list is kept as
//! recorded: a folder gone from disk stays listed (the core never looks at
//! the disk).
//!
//! `createSession` takes only `file:` URIs of existing directories (issue
//! 25; docs/DECISIONS.md, 28): [`check_uris`] refuses any other URI at once,
//! and [`check_kinds`] refuses one the shell found is not a directory, from
//! the answer to the `GitCmd::Inspect` the create asks anyway (the shell
//! reads the disk; the rule is here). An `Inspect` that did not run says
//! nothing of the folders, so the create is refused ([`unread`]) rather
//! than made in a folder nobody looked at.
//!
//! Pure functions over the recorded list, so the host, the sim and the
//! tests share one set of rules.

use ahp_types::actions::StateAction;
use ahp_types::Uri;

/// The list a new session records from `createSession.workingDirectories`:
/// duplicates dropped (first place kept), and only the first (the process
/// root) when the backend cannot take peers.
pub fn initial(requested: &[Uri], peers: bool) -> Vec<Uri> {
    let mut out: Vec<Uri> = Vec::new();
    for dir in requested {
        if !out.contains(dir) {
            out.push(dir.clone());
        }
    }
    if !peers {
        out.truncate(1);
    }
    out
}

/// Refuses a `createSession` working directory that is not a `file:` URI
/// of an absolute local path (`file:///abs`, or `file://localhost/abs`):
/// a bare path, another scheme (`http:`, `vscode-remote:`), a relative
/// one. The `Err` is the -32602 message, naming the folder.
pub fn check_uris(folders: &[Uri]) -> Result<(), String> {
    for folder in folders {
        if crate::git::path_of_uri(folder).is_none() {
            crate::mark!("create_refused_folder_not_file_uri");
            return Err(format!(
                "working directory \"{}\" is not a file: URI of a local folder (file:///absolute/path)",
                crate::ids::printable_up_to(folder, crate::ids::PATH_SHOWN_MAX)
            ));
        }
    }
    Ok(())
}

/// Refuses a `createSession` whose working directories the shell found are
/// not directories (`facts.not_directories`, for the paths of `folders`,
/// each a `file:` URI [`check_uris`] passed). The `Err` is the -32602
/// message, naming the folder as the client wrote it.
pub fn check_kinds(folders: &[Uri], facts: &crate::git::RepoFacts) -> Result<(), String> {
    use crate::git::FolderKind;
    for folder in folders {
        let Some(path) = crate::git::path_of_uri(folder) else { continue };
        let Some((_, kind)) = facts.not_directories.iter().find(|(p, _)| *p == path) else { continue };
        crate::mark!("create_refused_folder_not_a_directory");
        let what = match kind {
            FolderKind::Missing => "does not exist",
            FolderKind::NotADirectory => "is not a directory",
            FolderKind::Unreadable => "cannot be read by the host",
        };
        return Err(format!("working directory \"{}\" {what}", crate::ids::printable_up_to(folder, crate::ids::PATH_SHOWN_MAX)));
    }
    Ok(())
}

/// The words of a create refused because its folders could not be looked
/// at: the shell's `GitCmd::Inspect` did not run (`message`, its words),
/// so nothing says they are directories (issue 25). Not the client's
/// fault, and maybe not lasting: a -32603 (`createSession`) or
/// `unavailable` (a child session), naming the first folder.
pub fn unread(folders: &[Uri], message: &str) -> String {
    crate::mark!("create_refused_folder_unread");
    let shown = folders.first().map(|f| crate::ids::printable_up_to(f, crate::ids::PATH_SHOWN_MAX)).unwrap_or_default();
    format!("working directory \"{shown}\" could not be looked at ({message}); nothing was made, try again")
}

/// The peers of a recorded list (everything after the root).
pub fn peers(list: &[Uri]) -> Vec<Uri> {
    list.iter().skip(1).cloned().collect()
}

/// Whether `action` is one of the session's working-directory actions.
pub fn is_folder_action(action: &StateAction) -> bool {
    matches!(
        action,
        StateAction::SessionWorkingDirectorySet(_)
            | StateAction::SessionWorkingDirectoryRemoved(_)
            | StateAction::SessionWorkingDirectoryReplaced(_)
    )
}

/// Checks a working-directory action against the recorded `list`; the
/// error is the `rejectionReason` a client reads.
///
/// Refused: adding or removing a peer on a backend that cannot take
/// peers; removing the root; removing or replacing a folder not listed;
/// an empty URI; adding one already listed is accepted (a no-op, as the
/// reducer treats it).
pub fn check(list: &[Uri], action: &StateAction, peers: bool) -> Result<(), String> {
    match action {
        StateAction::SessionWorkingDirectorySet(a) => {
            if a.directory.is_empty() {
                return Err("a working directory URI must not be empty".into());
            }
            if list.is_empty() {
                // The first folder is the root: it can only come with the
                // session.
                return Err("this session has no process root; working directories are set when the session is created".into());
            }
            if !peers {
                return Err("this session's agent cannot take more than one working directory".into());
            }
            Ok(())
        }
        StateAction::SessionWorkingDirectoryRemoved(a) => match list.iter().position(|d| *d == a.directory) {
            Some(0) => Err("the first working directory is the process root: it can be replaced, never removed".into()),
            Some(_) => Ok(()),
            None => Err("that folder is not one of the session's working directories".into()),
        },
        StateAction::SessionWorkingDirectoryReplaced(a) => {
            if a.replacement.is_empty() {
                return Err("a working directory URI must not be empty".into());
            }
            match list.iter().position(|d| *d == a.directory) {
                Some(0) => Ok(()),
                Some(_) if peers => Ok(()),
                Some(_) => Err("this session's agent cannot take more than one working directory".into()),
                None => Err("that folder is not one of the session's working directories".into()),
            }
        }
        _ => Err("not a working-directory action".into()),
    }
}

/// The folder a working-directory action gives the session (the one a
/// `workingDirectorySet` adds, a `workingDirectoryReplaced`'s replacement),
/// which must be trusted (`crate::trust`); `None` for a removal.
pub fn added(action: &StateAction) -> Option<&Uri> {
    match action {
        StateAction::SessionWorkingDirectorySet(a) => Some(&a.directory),
        StateAction::SessionWorkingDirectoryReplaced(a) => Some(&a.replacement),
        _ => None,
    }
}

/// Applies a checked working-directory action to the recorded list, exactly
/// as the protocol's reducer applies it to `SessionState.workingDirectories`
/// (add if absent; remove; compare-and-swap with de-duplication).
pub fn apply(list: &mut Vec<Uri>, action: &StateAction) {
    match action {
        StateAction::SessionWorkingDirectorySet(a) if !list.contains(&a.directory) => list.push(a.directory.clone()),
        StateAction::SessionWorkingDirectoryRemoved(a) => list.retain(|d| *d != a.directory),
        StateAction::SessionWorkingDirectoryReplaced(a) => {
            let Some(idx) = list.iter().position(|d| *d == a.directory) else { return };
            if list[..idx].contains(&a.replacement) {
                list.remove(idx);
                return;
            }
            let updated: Vec<Uri> = list
                .iter()
                .enumerate()
                .filter_map(|(i, d)| if i == idx { Some(a.replacement.clone()) } else { (*d != a.replacement).then(|| d.clone()) })
                .collect();
            *list = updated;
        }
        _ => {}
    }
}

/// Whether applying `action` to `list` changes the process root (the agent
/// must be started again in the new root).
pub fn moves_root(list: &[Uri], action: &StateAction) -> bool {
    let mut after = list.to_vec();
    apply(&mut after, action);
    after.first() != list.first()
}

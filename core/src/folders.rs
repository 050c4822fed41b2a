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

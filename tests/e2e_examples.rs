//! The examples run against the built daemon (issue 22: "a doc that lies
//! fails the build"): `examples/python/ahp_client.py` walks docs/PROTOCOL.md
//! frame by frame (initialize, createSession, subscribe, a streamed turn, an
//! approved tool call, listSessions paged, an error code, a reconnect that
//! replays a turn another client ran) and exits non-zero at the first step
//! the server answers otherwise.
//!
//! Needs `python3` with the `websockets` package
//! (`python3 -m pip install -r examples/python/requirements.txt`; `.ci/run`
//! does it). Without them the test fails and says so.

mod common;

use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The example's path, or a failure saying how to run it.
fn python_example() -> PathBuf {
    const HOW: &str = "run `python3 -m pip install -r examples/python/requirements.txt`";
    match Command::new("python3").args(["-c", "import websockets"]).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("python3 cannot import websockets ({}): {HOW}\n{}", out.status, String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("`python3` is not on PATH ({e}): install Python 3.9+, then {HOW}"),
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/ahp_client.py");
    assert!(script.is_file(), "{} is missing", script.display());
    script
}

#[test]
fn the_python_example_walks_the_protocol_guide_against_the_daemon() {
    let script = python_example();
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).expect("work folder");
    let daemon = Daemon::start_with(&dir.path().join("data"), &["--awareness-dir", ""]);
    // As the guide says: the URL, and the token `ahpd token` prints.
    let token = ahpd_cli(&["token", "--data-dir", dir.path().join("data").to_str().expect("utf-8")], None);
    let token = String::from_utf8_lossy(&token.stdout).trim().to_owned();
    assert_eq!(Some(&token), daemon.token.as_ref(), "ahpd token prints the daemon's connection token");
    let out = Command::new("python3")
        .arg(&script)
        .args(["--url", &format!("ws://{}/", daemon.addr), "--token", &token, "--folder"])
        .arg(&work)
        .output()
        .expect("run the Python example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the Python example failed ({}):\n{stdout}\n{stderr}\ndaemon log:\n{}", out.status, daemon.log_text());
    // What it saw, as the guide tells it.
    assert!(stdout.contains("turn t1 reply: 'Echo: hello from Python'"), "{stdout}");
    assert!(stdout.contains("turn t2 after approval:") && stdout.contains("chat/toolCallComplete"), "{stdout}");
    assert!(stdout.contains("resourceRead notes.md: 'hello from Python\\n' (utf-8)"), "{stdout}");
    assert!(stdout.contains("watch ahp-resource-watch:") && stdout.contains("later.md"), "{stdout}");
    assert!(stdout.contains("reconnect: replay of"), "{stdout}");
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}");
}

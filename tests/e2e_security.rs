//! The front door end to end (issue 46): no web page of a foreign origin,
//! no DNS-rebinding page and no client without the connection token gets a
//! WebSocket to the daemon (each refused on the HTTP upgrade, before any
//! frame, and counted in `/metrics`), while native clients with the token,
//! VS Code desktop's renderer and the daemon's own pages connect; and the
//! data directory is this user's alone whatever the umask.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ahp::ahp_types::commands::CreateSessionParams;
use common::*;
use serde_json::Value;

/// What the daemon answered an HTTP request: the status code and the body.
struct Answer {
    status: u16,
    body: String,
}

/// Sends one request head by hand (Host, Origin, Authorization are the
/// caller's, exactly as a browser or an attacker would send them) and reads
/// the response until the daemon closes or 101 arrives.
fn request(addr: &str, target: &str, host: Option<&str>, upgrade: bool, extra: &[(&str, &str)]) -> Answer {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(STEP)).expect("timeout");
    let mut head = format!("GET {target} HTTP/1.1\r\n");
    if let Some(host) = host {
        head.push_str(&format!("Host: {host}\r\n"));
    }
    if upgrade {
        head.push_str("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n");
    }
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write request");
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
        if bytes.starts_with(b"HTTP/1.1 101") && bytes.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Answer { status, body }
}

/// A WebSocket upgrade to `daemon` under its own Host, with `extra` headers.
fn upgrade(daemon: &Daemon, target: &str, extra: &[(&str, &str)]) -> Answer {
    request(&daemon.addr, target, Some(&daemon.addr), true, extra)
}

/// `name{label}`'s value in a `/metrics` text.
fn metric(text: &str, series: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(-1.0)
}

/// `createSession` in `folder` and a `/write` turn there, through the
/// official client at `url`; whether the file was written.
async fn write_through(url: &str, folder: &Path, name: &str) -> bool {
    let c = connect(url).await;
    within("initialize", c.initialize("security".to_owned(), vec!["1.0.0".to_owned()], vec![])).await.expect("initialize");
    let sid = format!("ahp-session:/{}", fresh_id());
    let params = CreateSessionParams {
        channel: sid.clone(),
        meta: None,
        provider: Some("echo".to_owned()),
        working_directories: Some(vec![file_uri(folder)]),
        config: None,
        active_client: None,
        progress_token: None,
    };
    let created: Value = within("createSession", c.request("createSession", params)).await.expect("createSession");
    assert_eq!(created, Value::Null);
    let (state, _ssub) = subscribe_session(&c, &sid).await;
    let chat = default_chat(&state);
    let (_chat, mut csub) = subscribe_chat(&c, &chat).await;
    turn(&c, &chat, &mut csub, "t1", &format!("/write {name} written by a client")).await;
    c.shutdown().await;
    folder.join(name).exists()
}

/// The three steps from a web page of another origin, from a
/// rebinding page and from a client with no token: each fails at the
/// upgrade and writes nothing, while the same steps from a native client
/// with the token write the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_page_or_a_client_without_the_token_cannot_drive_the_daemon() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = tmp.path().join("home");
    std::fs::create_dir_all(&folder).expect("folder");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let token = daemon.token.clone().expect("a host with no users directory asks a token by default");
    let bearer = format!("Bearer {token}");

    // 1. A web page of another origin, even one that somehow had the token.
    let evil = upgrade(&daemon, "/", &[("Origin", "https://evil.example"), ("Authorization", &bearer)]);
    assert_eq!(evil.status, 403, "{}", evil.body);
    assert!(evil.body.contains("origin"), "{}", evil.body);
    let evil = upgrade(&daemon, &format!("/?token={token}"), &[("Origin", "null")]);
    assert_eq!(evil.status, 403, "a sandboxed page's null origin is foreign too");

    // 2. A DNS-rebinding page: the daemon's port under a name of its own.
    let port = daemon.addr.rsplit(':').next().expect("port");
    let rebound = request(&daemon.addr, "/", Some(&format!("rebind.evil.example:{port}")), true, &[("Authorization", &bearer)]);
    assert_eq!(rebound.status, 403, "{}", rebound.body);
    assert_eq!(request(&daemon.addr, "/healthz", Some(&format!("rebind.evil.example:{port}")), false, &[]).status, 403, "plain HTTP too");
    assert_eq!(request(&daemon.addr, "/healthz", None, false, &[]).status, 403, "no Host at all");

    // 3. No token, a wrong one: 401 on the upgrade.
    let missing = upgrade(&daemon, "/", &[]);
    assert_eq!(missing.status, 401, "{}", missing.body);
    assert!(missing.body.contains("ahpd token"), "the refusal says how to get in: {}", missing.body);
    assert_eq!(upgrade(&daemon, "/", &[("Authorization", "Bearer not-the-token")]).status, 401);
    assert_eq!(upgrade(&daemon, "/?token=not-the-token", &[]).status, 401);
    let no_token_url = daemon.url.split('?').next().expect("url").to_owned();
    match within("connect without a token", tokio_tungstenite::connect_async(no_token_url.as_str())).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status().as_u16(), 401),
        other => panic!("a client with no token was upgraded: {:?}", other.map(|(_, r)| r.status())),
    }
    assert!(!folder.join("pwned.txt").exists());

    // The token in each of the ways a client can send it is taken: the
    // header, ?token= and VS Code's ?tkn= (from its desktop renderer's
    // origin), and the daemon's own pages' origin.
    assert_eq!(upgrade(&daemon, "/", &[("Authorization", &bearer)]).status, 101);
    assert_eq!(upgrade(&daemon, &format!("/?token={token}"), &[]).status, 101);
    assert_eq!(upgrade(&daemon, &format!("/?tkn={token}"), &[("Origin", "vscode-file://vscode-app")]).status, 101);
    assert_eq!(upgrade(&daemon, &format!("/?token={token}"), &[("Origin", &format!("http://{}", daemon.addr))]).status, 101);
    let localhost = format!("localhost:{port}");
    assert_eq!(request(&daemon.addr, &format!("/?token={token}"), Some(&localhost), true, &[("Origin", &format!("http://{localhost}"))]).status, 101);
    assert_eq!(request(&daemon.addr, "/healthz", Some(&localhost), false, &[]).status, 200);
    // Through a tunnel (`ssh -L 9765:127.0.0.1:<port>`) the client dialled
    // a port of its own: its loopback Host is still this daemon's.
    assert_eq!(request(&daemon.addr, &format!("/?token={token}"), Some("127.0.0.1:9765"), true, &[("Origin", "http://127.0.0.1:9765")]).status, 101);
    // A page of another local server is not the daemon's own.
    assert_eq!(upgrade(&daemon, &format!("/?token={token}"), &[("Origin", "http://127.0.0.1:3000")]).status, 403);

    // A native client (no Origin) with the token runs the steps and the
    // file is written: the refusals above are the front door's, not a
    // daemon that writes nothing anyway.
    assert!(write_through(&daemon.url, &folder, "notes.txt").await, "the client with the token wrote its file");

    // Each refusal is counted by reason; a refused origin is logged once.
    let metrics = request(&daemon.addr, "/metrics", Some(&daemon.addr), false, &[]).body;
    assert_eq!(metric(&metrics, "ahpd_http_refused_total{reason=\"origin\"}"), 3.0, "{metrics}");
    assert_eq!(metric(&metrics, "ahpd_http_refused_total{reason=\"host\"}"), 3.0, "{metrics}");
    assert_eq!(metric(&metrics, "ahpd_http_refused_total{reason=\"token\"}"), 4.0, "{metrics}");
    assert_eq!(upgrade(&daemon, "/", &[("Origin", "https://evil.example"), ("Authorization", &bearer)]).status, 403);
    let log = daemon.log_text();
    let warned = log.lines().filter(|l| l.contains("WARN") && l.contains("client.origin_refused") && l.contains("https://evil.example")).count();
    assert_eq!(warned, 1, "a refused origin is logged at warn once, with its peer:\n{log}");
    assert!(log.lines().any(|l| l.contains("client.origin_refused") && l.contains("peer=127.0.0.1:")), "{log}");
    assert!(!log.contains(&token), "the token is never logged");
}

/// `--allowed-origins` lets a listed web origin in; `--allowed-hosts` a
/// proxy's name; `--no-token` takes native clients with no token (and says
/// so in the log), still refusing foreign origins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_origins_and_hosts_are_taken_and_no_token_is_loud() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start_with(&tmp.path().join("data"), &["--allowed-origins", "https://app.example,vscode-webview://abc", "--allowed-hosts", "ahpd.proxy.example"]);
    let token = daemon.token.clone().expect("token");
    let target = format!("/?token={token}");
    assert_eq!(upgrade(&daemon, &target, &[("Origin", "https://app.example")]).status, 101);
    assert_eq!(upgrade(&daemon, &target, &[("Origin", "vscode-webview://abc")]).status, 101);
    assert_eq!(upgrade(&daemon, &target, &[("Origin", "https://other.example")]).status, 403);
    assert_eq!(request(&daemon.addr, &target, Some("ahpd.proxy.example"), true, &[]).status, 101, "a listed host, any port");
    assert_eq!(request(&daemon.addr, &target, Some("other.proxy.example"), true, &[]).status, 403);
    drop(daemon);

    // A bad origin in the settings is a configuration error (exit 78).
    let out = ahpd_cli(&["config", "check", "--data-dir", tmp.path().join("d2").to_str().expect("utf-8"), "--allowed-origins", "not an origin"], None);
    assert_eq!(out.status.code(), Some(78), "{}", String::from_utf8_lossy(&out.stderr));

    let open = Daemon::start_with(&tmp.path().join("open"), &["--no-token"]);
    assert_eq!(open.token, None, "the listening lines say no token is asked");
    assert_eq!(upgrade(&open, "/", &[]).status, 101);
    assert_eq!(upgrade(&open, "/", &[("Origin", "https://evil.example")]).status, 403, "--no-token still refuses web pages");
    assert!(open.log_text().contains("--no-token"), "{}", open.log_text());
}

/// `ahpd token` prints the token (making it before the first start, mode
/// 0600), and the daemon started later asks for that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ahpd_token_prints_the_token_the_daemon_asks_for() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let out = ahpd_cli(&["token", "--data-dir", data.to_str().expect("utf-8")], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(printed.len(), 64, "{printed}");
    assert_eq!(mode(&data.join("host-token")), 0o600);
    assert_eq!(mode(&data), 0o700);
    let daemon = Daemon::start(&data);
    assert_eq!(daemon.token.as_deref(), Some(printed.as_str()));
    let c = connect(&daemon.url).await;
    within("ping", c.request::<_, Value>("ping", serde_json::json!({}))).await.expect("ping with the token");
    c.shutdown().await;
}

/// The permission bits of `p`.
fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

/// Every file and folder the daemon writes under its data directory is
/// this user's alone under the usual umask (022), and a data directory an
/// older build left readable by others is narrowed at start, with a log
/// line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_is_private_whatever_the_umask() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let folder = tmp.path().join("work");
    std::fs::create_dir_all(&folder).expect("folder");
    let mut daemon = Daemon::start(&data);
    assert!(write_through(&daemon.url, &folder, "a.txt").await);
    let _ = daemon.terminate();
    let files = walk(&data, |p, dir| assert_eq!(mode(p), if dir { 0o700 } else { 0o600 }, "{}", p.display()));
    assert!(files >= 4, "tokens, the session's record and its transcript were looked at ({files} files)");

    // Widen everything as an older build under umask 022 left it; the next
    // start narrows it and says so.
    walk(&data, |p, dir| std::fs::set_permissions(p, std::fs::Permissions::from_mode(if dir { 0o755 } else { 0o644 })).expect("chmod"));
    let from = log_len(&data);
    let daemon = Daemon::start(&data);
    wait_log_text(&data, from, "made this user's alone").await;
    let log = log_since(&data, from);
    assert_eq!(log.matches("readable by other users").count(), 1, "{log}");
    let (c, _, _root) = connect_init(&daemon.url, "security").await;
    let rows = list(&c).await;
    assert_eq!(rows.len(), 1, "the session is still there");
    c.shutdown().await;
    walk(&data, |p, dir| assert_eq!(mode(p), if dir { 0o700 } else { 0o600 }, "{}", p.display()));
}

/// Calls `visit(path, is_folder)` on `root` and every folder and file below
/// it (links not followed), each folder before what it holds; returns how
/// many files it visited.
fn walk(root: &Path, mut visit: impl FnMut(&Path, bool)) -> usize {
    let mut files = 0;
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        visit(&dir, true);
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).expect("stat");
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                files += 1;
                visit(&entry.path(), false);
            }
        }
    }
    files
}

/// Waits (bounded) until the daemon log of `data` since `from` holds `text`.
async fn wait_log_text(data: &Path, from: usize, text: &str) {
    within(text, async {
        while !log_since(data, from).contains(text) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

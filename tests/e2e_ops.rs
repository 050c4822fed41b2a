//! End-to-end tests of operating the daemon (issue 12, and issue 7's shell
//! half): `ahpd config check`, `/healthz` and `/metrics`, the loopback
//! refusal without a users directory, users and tokens (including a bearer
//! token in the WebSocket handshake), and SIGTERM during a write storm.
//!
//! Every await is bounded by [`STEP`], so a hang fails fast as a timeout
//! naming the step.

mod common;

use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahp::ahp_types::actions::{SessionTitleChangedAction, StateAction};
use ahp::ahp_types::commands::{AuthenticateParams, DisposeSessionParams};
use ahp::ahp_types::ROOT_RESOURCE_URI;
use ahp::{Client, SubscriptionEvent};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// Runs `ahpd <args>` to completion, with no config file of the developer's
/// in the way.
fn ahpd(args: &[&str], config_home: &Path) -> Output {
    ahpd_with_env(args, config_home, &[])
}

/// [`ahpd`] with `env` set as well.
fn ahpd_with_env(args: &[&str], config_home: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ahpd"))
        .args(args)
        .env_remove("AHPD_TRUSTED_FOLDERS")
        .envs(env.iter().copied())
        .env("XDG_CONFIG_HOME", config_home)
        .env_remove("AHPD_DATA_DIR")
        .env_remove("AHPD_LISTEN")
        .env_remove("AHPD_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run ahpd")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("an exit code")
}

// ---------------------------------------------------------------------------
// ahpd config check
// ---------------------------------------------------------------------------

const TOKEN_A: &str = "alice-token-4f1d8a0c";
const TOKEN_B: &str = "bob-token-9e2b7c35";
const TOKEN_WRONG: &str = "mallory-token-00000000";

fn sha256_hex(s: &str) -> String {
    ahpd_core::grants::token_hash(s)
}

fn write_users(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("users.toml");
    let body = format!(
        "[[users]]\nid = \"alice\"\ntoken_sha256 = \"{}\"\nrole = \"member\"\n\n[[users.memberships]]\nteam = \"red\"\nproject = \"p\"\nprimary = true\n\n\
         [[users]]\nid = \"bob\"\ntoken_sha256 = \"{}\"\nrole = \"member\"\n",
        sha256_hex(TOKEN_A),
        sha256_hex(TOKEN_B)
    );
    std::fs::write(&path, body).expect("write users.toml");
    path
}

#[test]
fn config_check_accepts_a_good_file_and_names_bad_keys_and_values() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let users = write_users(tmp.path());
    std::fs::write(tmp.path().join("policy.toml"), "[[rules]]\nwho = \"user:bob\"\nproviders = [\"gemini\"]\neffect = \"deny\"\n").expect("write policy");
    let good = tmp.path().join("good.toml");
    std::fs::write(
        &good,
        "listen = \"127.0.0.1:9999\"\ndata_dir = \"data\"\nsessions = \"memory\"\nsleep_after_minutes = 2.5\nresidency_limit = 3\n\
         worktrees_root = \"/tmp/wt\"\nshow_external_sessions = \"last7Days\"\nusers = \"users.toml\"\npolicy = \"policy.toml\"\n\
         trusted_folders = [\"code\", \"/srv/repos\"]\nlog_format = \"json\"\n\n[agents]\nclaude = \"claude-code-acp\"\n\n[limits]\nframes_burst = 77\n",
    )
    .expect("write config");
    let out = ahpd(&["config", "check", "--config", good.to_str().expect("utf-8 path")], tmp.path());
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(code(&out), 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    for want in [
        "listen = \"127.0.0.1:9999\"",
        "sessions = \"memory\"",
        "sleep_after_minutes = 2.5",
        "residency_limit = 3",
        "show_external_sessions = \"last7Days\"",
        "frames_burst = 77",
        "[agents.\"claude\"]\ncommand = \"claude-code-acp\"",
        "id = \"alice\"",
        "who = \"user:bob\"",
        "token_sha256 = \"<elided>\"",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    assert!(stdout.contains(&tmp.path().join("data").display().to_string()), "relative data_dir resolves against the file: {stdout}");
    let trusted = format!("trusted_folders = [\"{}\", \"/srv/repos\"]", tmp.path().join("code").display());
    assert!(stdout.contains(&trusted), "relative trusted folders resolve against the file: {stdout}");
    assert!(!stdout.contains(&sha256_hex(TOKEN_A)), "a token hash was printed:\n{stdout}");

    // A flag beats the file.
    let out = ahpd(&["config", "check", "--config", good.to_str().expect("utf-8"), "--residency-limit", "9"], tmp.path());
    assert_eq!(code(&out), 0);
    assert!(text(&out.stdout).contains("residency_limit = 9"));
    let out = ahpd(&["config", "check", "--config", good.to_str().expect("utf-8"), "--trusted-folder", "/only/this"], tmp.path());
    assert_eq!(code(&out), 0);
    assert!(text(&out.stdout).contains("trusted_folders = [\"/only/this\"]"), "{}", text(&out.stdout));
    // AHPD_TRUSTED_FOLDERS: `:`-separated when no flag is given; a URI is
    // refused whole, naming the variable.
    let env_check = |value: &str| ahpd_with_env(&["config", "check", "--config", good.to_str().expect("utf-8")], tmp.path(), &[("AHPD_TRUSTED_FOLDERS", value)]);
    let out = env_check("/a:/b/../c");
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("trusted_folders = [\"/a\", \"/c\"]"), "{}", text(&out.stdout));
    let out = env_check("file:///tmp");
    assert_eq!(code(&out), EX_CONFIG);
    assert!(text(&out.stderr).contains("AHPD_TRUSTED_FOLDERS") && text(&out.stderr).contains("is a URI"), "{}", text(&out.stderr));
    // A trusted folder is a path, not a URI.
    let out = ahpd(&["config", "check", "--config", good.to_str().expect("utf-8"), "--trusted-folder", "file:///only/this"], tmp.path());
    assert_eq!(code(&out), EX_CONFIG);
    assert!(text(&out.stderr).contains("is a URI"), "{}", text(&out.stderr));

    // An unknown key: exit 78, the key and its line named.
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "listen = \"127.0.0.1:0\"\n\n[limits]\nframes_burst = 5\nframe_burst = 6\n").expect("write");
    let out = ahpd(&["config", "check", "--config", bad.to_str().expect("utf-8")], tmp.path());
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), EX_CONFIG, "{stderr}");
    assert!(stderr.contains("frame_burst") && stderr.contains("line 5"), "{stderr}");

    // A bad value: exit 78, with the line.
    std::fs::write(&bad, "residency_limit = 3\nsleep_after_minutes = -4\n").expect("write");
    let out = ahpd(&["config", "check", "--config", bad.to_str().expect("utf-8")], tmp.path());
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), EX_CONFIG, "{stderr}");
    assert!(stderr.contains("line 2") && stderr.contains("minutes"), "{stderr}");
    std::fs::write(&bad, "sessions = \"disk\"\n").expect("write");
    let out = ahpd(&["config", "check", "--config", bad.to_str().expect("utf-8")], tmp.path());
    assert_eq!(code(&out), EX_CONFIG, "{}", text(&out.stderr));

    // A bad users directory: exit 78.
    std::fs::write(tmp.path().join("users.toml"), "[[users]]\nid = \"x\"\ntoken_sha256 = \"abc\"\nrole = \"member\"\n").expect("write");
    let out = ahpd(&["config", "check", "--config", good.to_str().expect("utf-8")], tmp.path());
    assert_eq!(code(&out), EX_CONFIG);
    assert!(text(&out.stderr).contains("token_sha256"), "{}", text(&out.stderr));
    let _ = users;

    // A missing named file, an unknown flag: exit 78 as well.
    let out = ahpd(&["config", "check", "--config", "/nonexistent/ahpd.toml"], tmp.path());
    assert_eq!(code(&out), EX_CONFIG);
    let out = ahpd(&["config", "check", "--no-such-flag"], tmp.path());
    assert_eq!(code(&out), EX_CONFIG);
    // No file at the default place: the defaults, valid.
    let out = ahpd(&["config", "check"], tmp.path());
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("listen = \"127.0.0.1:8765\""));
}

// ---------------------------------------------------------------------------
// Exit codes and the command line (issue 25)
// ---------------------------------------------------------------------------

/// The one exit code of every configuration error (sysexits.h EX_CONFIG).
const EX_CONFIG: i32 = 78;

/// `ahpd serve` with `args` and `env` against a fresh data directory, run to
/// its exit (every case here is refused before it listens).
fn serve_refused(tmp: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let data = tmp.join("data");
    let mut all = vec!["serve", "--data-dir", data.to_str().expect("utf-8")];
    if !args.iter().any(|a| a.starts_with("--listen")) {
        all.extend_from_slice(&["--listen", "127.0.0.1:0"]);
    }
    all.extend_from_slice(args);
    let out = ahpd_with_env(&all, tmp, env);
    (code(&out), text(&out.stderr))
}

#[test]
fn every_config_error_exits_78_as_the_unit_expects() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bad = tmp.path().join("bad.toml");
    let p = |f: &Path| f.to_str().expect("utf-8").to_owned();
    // The file: missing, unknown key, wrong type.
    let cases: Vec<(&str, String)> = vec![
        ("missing file", "--config=/nonexistent/ahpd.toml".to_owned()),
        ("unknown key", { std::fs::write(tmp.path().join("k.toml"), "lisen = 3\n").expect("write"); format!("--config={}", p(&tmp.path().join("k.toml"))) }),
        ("wrong type", { std::fs::write(tmp.path().join("t.toml"), "residency_limit = \"ten\"\n").expect("write"); format!("--config={}", p(&tmp.path().join("t.toml"))) }),
        ("bad users", { std::fs::write(&bad, "[[users]]\nid = \"x\"\n").expect("write"); format!("--users={}", p(&bad)) }),
        ("bad policy", { std::fs::write(tmp.path().join("p.toml"), "[[rules]]\nwho = \"everyone\"\neffect = \"deny\"\n").expect("write"); format!("--policy={}", p(&tmp.path().join("p.toml"))) }),
        ("bad flag value", "--residency-limit=abc".to_owned()),
        ("unknown flag", "--no-such-flag".to_owned()),
        ("unresolvable listen", "--listen=nowhere.invalid:1".to_owned()),
    ];
    for (what, arg) in &cases {
        let (code, stderr) = serve_refused(tmp.path(), &[arg], &[]);
        assert_eq!(code, EX_CONFIG, "{what}: {stderr}");
        let out = ahpd(&["config", "check", arg], tmp.path());
        assert_eq!(crate::code(&out), EX_CONFIG, "config check, {what}: {}", text(&out.stderr));
    }

    // A bad AHPD_* value is reported under the variable's name, not a flag
    // the user never passed.
    let (code, stderr) = serve_refused(tmp.path(), &[], &[("AHPD_RESIDENCY_LIMIT", "abc")]);
    assert_eq!(code, EX_CONFIG, "{stderr}");
    assert!(stderr.contains("AHPD_RESIDENCY_LIMIT") && !stderr.contains("--residency-limit"), "{stderr}");
    // The flag given on the command line is named as the flag.
    let (_, stderr) = serve_refused(tmp.path(), &["--residency-limit", "abc"], &[]);
    assert!(stderr.contains("--residency-limit"), "{stderr}");

    // An invalid RUST_LOG is a config error naming the variable.
    let (code, stderr) = serve_refused(tmp.path(), &[], &[("RUST_LOG", "ahpd=loud")]);
    assert_eq!(code, EX_CONFIG, "{stderr}");
    assert!(stderr.contains("RUST_LOG"), "{stderr}");
    let out = ahpd_with_env(&["config", "check"], tmp.path(), &[("RUST_LOG", "ahpd=loud")]);
    assert_eq!(crate::code(&out), EX_CONFIG, "{}", text(&out.stderr));

    // The unit stops restarting on that code, and its Documentation= is the
    // file its own install steps put there.
    let unit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../contrib/ahpd.service")).expect("read the unit");
    assert!(unit.lines().any(|l| l.starts_with("RestartPreventExitStatus=") && l.split(['=', ' ']).any(|c| c == "78")), "{unit}");
    let doc = unit.lines().find_map(|l| l.strip_prefix("Documentation=file://%h/")).expect("a Documentation= file under %h");
    assert!(unit.contains(&format!("install -Dm644 docs/USER-GUIDE.md ~/{doc}")), "the install steps put {doc} there");
    assert!(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/USER-GUIDE.md")).exists());
}

#[test]
fn version_flag_completions_and_host_names_in_listen() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let version = format!("ahpd {}", env!("CARGO_PKG_VERSION"));
    for args in [&["--version"][..], &["version"][..]] {
        let out = ahpd(args, tmp.path());
        assert_eq!((code(&out), text(&out.stdout).trim()), (0, version.as_str()), "{args:?}");
    }
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef ahpd"), ("fish", "complete -c ahpd")] {
        let out = ahpd(&["completions", shell], tmp.path());
        let script = text(&out.stdout);
        assert_eq!(code(&out), 0, "{shell}: {}", text(&out.stderr));
        assert!(script.contains(marker) && script.contains("serve") && script.contains("listen"), "{shell}:\n{script}");
    }
    let out = ahpd(&["completions", "cmd.exe"], tmp.path());
    assert_eq!(code(&out), 2, "{}", text(&out.stderr));

    // A host name resolves; the daemon listens and answers there.
    let out = ahpd(&["config", "check", "--listen", "localhost:8765"], tmp.path());
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("listen = \"localhost:8765\""), "{}", text(&out.stdout));
    let mut daemon = Daemon::start_at("localhost:0", &tmp.path().join("data"), &[], &[]);
    let url = daemon.url.clone();
    let status = http_get(&daemon.addr, "/healthz").0;
    let _ = daemon.terminate();
    assert_eq!(status, 200, "{url}");
}

// ---------------------------------------------------------------------------
// WebSocket close codes (issue 25, RFC 6455 7.4.1)
// ---------------------------------------------------------------------------

/// Reads until a close frame and returns its code and reason; `None` when
/// the connection ends without one.
async fn close_code(rx: &mut futures_util::stream::SplitStream<Raw>, what: &str) -> Option<(u16, String)> {
    within(what, async {
        loop {
            match rx.next().await {
                Some(Ok(WsMessage::Close(Some(f)))) => return Some((u16::from(f.code), f.reason.as_str().to_owned())),
                Some(Ok(WsMessage::Close(None))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_and_shutdown_close_with_their_codes() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut daemon = Daemon::start(&tmp.path().join("data"));

    // A 50 MB frame: close 1009, read by the client while it still sends
    // (not a TCP reset).
    let (ws, _) = within("connect", tokio_tungstenite::connect_async(daemon.url.as_str())).await.expect("connect");
    let (mut tx, mut rx) = ws.split();
    let big = "x".repeat(50 << 20);
    let sending = tokio::spawn(async move {
        let _ = tx.send(WsMessage::Text(big.into())).await;
        tx
    });
    let closed = close_code(&mut rx, "close after a 50 MB frame").await;
    assert_eq!(closed.as_ref().map(|c| c.0), Some(1009), "{closed:?}");
    assert!(closed.is_some_and(|c| c.1.contains("too big")));
    drop(within("the big send ends", sending).await);

    // A text frame that is not UTF-8: close 1007.
    let (ws, _) = within("connect", tokio_tungstenite::connect_async(daemon.url.as_str())).await.expect("connect");
    let (mut tx, mut rx) = ws.split();
    let invalid = Frame::message(vec![0x7b, 0xff, 0xfe, 0x7d], OpCode::Data(Data::Text), true);
    within("send invalid UTF-8", tx.send(WsMessage::Frame(invalid))).await.expect("send");
    let closed = close_code(&mut rx, "close after invalid UTF-8").await;
    assert_eq!(closed.as_ref().map(|c| c.0), Some(1007), "{closed:?}");

    // A well-behaved client is unaffected, and on shutdown is told 1001.
    let (ws, _) = within("connect", tokio_tungstenite::connect_async(daemon.url.as_str())).await.expect("connect");
    let (mut tx, mut rx) = ws.split();
    let hello = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params("closer") });
    within("initialize", tx.send(WsMessage::Text(hello.to_string().into()))).await.expect("send");
    let reply = within("initialize reply", rx.next()).await;
    assert!(matches!(reply, Some(Ok(WsMessage::Text(_)))), "{reply:?}");
    daemon.signal_term();
    let closed = close_code(&mut rx, "close on shutdown").await;
    assert_eq!(closed.as_ref().map(|c| c.0), Some(1001), "{closed:?}");
    assert!(daemon.wait_exit().success());
}

/// A connection that keeps exceeding its frame rate is closed with 1008
/// and a reason after a bounded time (10 s), and its refusals are logged as
/// at most one summary line a second, never one per frame. It floods for
/// as long as that takes; nothing asserts a duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_keeps_flooding_is_closed_with_1008_and_logged_in_summaries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start_with(&data, &["--limit-frames-per-second", "10", "--limit-frames-burst", "10"]);
    let (ws, _) = within("connect", tokio_tungstenite::connect_async(daemon.url.as_str())).await.expect("connect");
    let (mut tx, mut rx) = ws.split();
    let flooding = tokio::spawn(async move {
        let mut sent = 0u64;
        // 200 frames/s, 20 times the limit, until the daemon closes it
        // (bounded: 30 s).
        while sent < 6_000 {
            let frame = json!({ "jsonrpc": "2.0", "id": sent + 1, "method": "ping" });
            if tx.send(WsMessage::Text(frame.to_string().into())).await.is_err() {
                break;
            }
            sent += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sent
    });
    let mut refusals = 0u64;
    let closed = tokio::time::timeout(Duration::from_secs(40), async {
        loop {
            match rx.next().await {
                Some(Ok(WsMessage::Text(t))) => refusals += u64::from(t.as_str().contains("rate limit")),
                Some(Ok(WsMessage::Close(Some(f)))) => return Some((u16::from(f.code), f.reason.as_str().to_owned())),
                Some(Ok(_)) => {}
                _ => return None,
            }
        }
    })
    .await
    .expect("closed within 40 s of flooding");
    let sent = flooding.await.expect("flooding task");
    assert_eq!(closed.as_ref().map(|c| c.0), Some(1008), "{closed:?}");
    assert!(closed.as_ref().is_some_and(|c| c.1.contains("rate limit")), "{closed:?}");
    assert!(refusals > 100, "the frames over the rate were refused one by one: {refusals} of {sent}");

    // Another client is served meanwhile and after.
    let c = connect(&daemon.url).await;
    c.shutdown().await;
    let _ = daemon.terminate();
    let log = std::fs::read_to_string(log_path(&data)).unwrap_or_default();
    let lines = log.lines().filter(|l| l.contains("limit.rate") && l.contains("frames refused")).count();
    assert!(lines >= 2 && (lines as u64) < refusals / 10, "{lines} summary lines for {refusals} refusals:\n{log}");
    assert!(log.contains("limit.rate_closed"), "{log}");
}

// ---------------------------------------------------------------------------
// HTTP: /healthz, /metrics
// ---------------------------------------------------------------------------

/// One plain HTTP GET; returns (status code, body).
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(STEP)).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("write request");
    let mut response = String::new();
    s.read_to_string(&mut response).expect("read response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    (status, body.to_owned())
}

/// The value of the sample `name` (with its labels, exactly as printed).
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}


#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_a_workload_and_healthz_is_ok() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start(&data);
    let addr = daemon.addr.clone();

    let (status, body) = http_get(&addr, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    assert_eq!(http_get(&addr, "/nowhere").0, 404);
    let (status, before) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(sample(&before, "ahpd_connected_clients"), 0.0, "{before}");

    let (c, _, _root) = connect_init(&daemon.url, "ops-metrics").await;
    let (_sid, chat, _ssub, _chat_state, mut csub) = new_session(&c).await;
    turn(&c, &chat, &mut csub, "t1", "hello metrics").await;
    assert!(!list(&c).await.is_empty());
    let e = rpc_error(within("bad method", c.request::<_, Value>("noSuchMethod", json!({}))).await);
    assert_eq!(e.code, -32601);

    let (status, m) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);
    let want = [
        ("ahpd_requests_total{method=\"initialize\",code=\"ok\"}", 1.0),
        ("ahpd_requests_total{method=\"createSession\",code=\"ok\"}", 1.0),
        ("ahpd_requests_total{method=\"listSessions\",code=\"ok\"}", 1.0),
        ("ahpd_requests_total{method=\"subscribe\",code=\"ok\"}", 2.0),
        ("ahpd_requests_total{method=\"other\",code=\"-32601\"}", 1.0),
        ("ahpd_request_duration_seconds_count{method=\"createSession\"}", 1.0),
        ("ahpd_request_duration_seconds_bucket{method=\"listSessions\",le=\"+Inf\"}", 1.0),
        ("ahpd_sessions{phase=\"live\"}", 1.0),
        ("ahpd_sessions_resident", 1.0),
        ("ahpd_connected_clients", 1.0),
    ];
    for (name, v) in want {
        assert_eq!(sample(&m, name), v, "{name} in:\n{m}");
    }
    for name in ["ahpd_session_sleeps_total", "ahpd_residency_evictions_total", "ahpd_session_wakes_total", "ahpd_session_failed_resumes_total"] {
        assert!(m.contains(&format!("# TYPE {name} counter")), "{name} missing:\n{m}");
    }
    c.shutdown().await;
}

// ---------------------------------------------------------------------------
// Loopback only without a users directory
// ---------------------------------------------------------------------------

/// Starts `ahpd serve` with `args` (no config file of the developer's: a
/// config home in `tmp`), reads its first stdout line, the URL, and closes
/// the pipe as a script that only wants the URL does. Returns the child,
/// whether the line was read, and the line.
fn serve_reading_url_only(tmp: &Path, args: &[&str]) -> (std::process::Child, std::io::Result<usize>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahpd"))
        .arg("serve")
        .args(args)
        .env("XDG_CONFIG_HOME", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ahpd");
    let mut line = String::new();
    let read = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
    (child, read, line)
}

/// A program that starts the daemon, reads the URL from its first line and
/// closes the pipe (as a script's `read` or `head -n 1` does) leaves a
/// daemon that goes on serving: what it prints after the URL is best
/// effort, never a reason to stop. (The second line, how a client gets in,
/// once made such a daemon exit when the reader closed the pipe between the
/// two lines' writes: a window of microseconds this test cannot force, seen
/// under load in `a_non_loopback_address_needs_a_users_directory`; this
/// test holds the steady state, the pipe closed before anything more is
/// printed.)
#[test]
fn a_daemon_whose_stdout_reader_left_goes_on_serving() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let (mut child, read, line) = serve_reading_url_only(tmp.path(), &["--listen", "127.0.0.1:0", "--claude-projects", "", "--data-dir", data.to_str().expect("utf-8")]);
    read.expect("read the listening line");
    // The reader is gone; give the daemon the time to write what follows.
    std::thread::sleep(Duration::from_millis(300));
    let addr = line.trim().strip_prefix("ahpd listening on ws://").and_then(|r| r.strip_suffix('/')).unwrap_or_default().to_owned();
    let running = child.try_wait().expect("try_wait").is_none();
    let healthy = running.then(|| http_get(&addr, "/healthz").0);
    let _ = child.kill();
    let _ = child.wait();
    assert!(running, "the daemon exited once its stdout reader left (first line {line:?})");
    assert_eq!(healthy, Some(200));
}

#[test]
fn a_non_loopback_address_needs_a_users_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let out = ahpd(&["serve", "--listen", "0.0.0.0:0", "--data-dir", data.to_str().expect("utf-8")], tmp.path());
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), EX_CONFIG, "{stderr}");
    assert!(stderr.contains("refusing to listen on 0.0.0.0:0") && stderr.contains("--users"), "{stderr}");

    // With a users directory it starts.
    let users = write_users(tmp.path());
    let (mut child, read, line) = serve_reading_url_only(
        tmp.path(),
        &["--listen", "0.0.0.0:0", "--data-dir", data.to_str().expect("utf-8"), "--users", users.to_str().expect("utf-8")],
    );
    let port = line.trim().strip_prefix("ahpd listening on ws://0.0.0.0:").and_then(|r| r.strip_suffix('/')).map(str::to_owned);
    let healthy = port.as_ref().map(|p| http_get(&format!("127.0.0.1:{p}"), "/healthz").0);
    let _ = child.kill();
    let _ = child.wait();
    assert!(read.is_ok() && port.is_some(), "unexpected first line {line:?}");
    assert_eq!(healthy, Some(200));
}

// ---------------------------------------------------------------------------
// Users and tokens
// ---------------------------------------------------------------------------

async fn authenticate(c: &Client, token: &str) -> Result<Value, ahp::ClientError> {
    let params = AuthenticateParams { channel: ROOT_RESOURCE_URI.to_owned(), meta: None, resource: "ahpd".to_owned(), token: token.to_owned(), expires_in: None, scopes: None };
    within("authenticate", c.request("authenticate", params)).await
}

type Raw = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A raw WebSocket connection with `Authorization: Bearer <token>`.
async fn raw_with_bearer(url: &str, token: &str) -> Raw {
    let mut request = url.into_client_request().expect("request");
    request.headers_mut().insert("Authorization", format!("Bearer {token}").parse().expect("header value"));
    let (ws, _) = within("raw connect", tokio_tungstenite::connect_async(request)).await.expect("raw connect");
    ws
}

/// Sends a request and returns its reply, failing on a frame with the
/// shell's reserved id (which must never reach a client); `None` when the
/// connection is closed before or while it is sent.
async fn raw_request(ws: &mut Raw, id: u64, method: &str, params: Value) -> Option<Value> {
    let frame = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    // A connection the daemon already closed cannot be sent to: no reply.
    if within("raw send", ws.send(WsMessage::Text(frame.to_string().into()))).await.is_err() {
        return None;
    }
    within("raw reply", async {
        loop {
            match ws.next().await {
                Some(Ok(WsMessage::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).expect("json frame");
                    assert_ne!(v.get("id").and_then(Value::as_u64), Some(u64::MAX), "the handshake's authenticate reply leaked: {v}");
                    if v.get("id").and_then(Value::as_u64) == Some(id) {
                        return Some(v);
                    }
                }
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
}

fn initialize_params(client_id: &str) -> Value {
    json!({ "channel": ROOT_RESOURCE_URI, "protocolVersions": ["1.0.0"], "clientId": client_id })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_deletes_and_tokens_stay_out_of_the_log() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let users = write_users(tmp.path());
    let data = tmp.path().join("data");
    let daemon = Daemon::start_with(&data, &["--users", users.to_str().expect("utf-8")]);

    // Bob signs in with `authenticate` and makes a session.
    let (bob, _, _root) = connect_init(&daemon.url, "ops-bob").await;
    authenticate(&bob, TOKEN_B).await.expect("bob authenticates");
    let (sid, _chat, _ssub, _cs, _csub) = new_session(&bob).await;

    // Nobody signed in may not delete it either, nor is sent the catalogue
    // its handshake asked for.
    let (anon, anon_init, _r) = connect_init(&daemon.url, "ops-anon").await;
    assert!(anon_init.snapshots.is_empty(), "{:?}", anon_init.snapshots);
    let params = || DisposeSessionParams { channel: sid.clone(), meta: None };
    let e = rpc_error(within("anon dispose", anon.request::<_, Value>("disposeSession", params())).await);
    assert_eq!(e.code, -32009, "{e:?}");

    // A wrong token is refused.
    let e = rpc_error(authenticate(&anon, TOKEN_WRONG).await);
    assert_eq!(e.code, -32602, "{e:?}");

    // Alice signs in with `authenticate`: she may not delete Bob's session.
    let (alice, _, _r2) = connect_init(&daemon.url, "ops-alice").await;
    authenticate(&alice, TOKEN_A).await.expect("alice authenticates");
    let e = rpc_error(within("alice dispose", alice.request::<_, Value>("disposeSession", params())).await);
    assert_eq!((e.code, e.message.as_str()), (-32009, "Only the session's owner can delete it."));

    // Alice again, with a bearer token in the handshake: the same refusal,
    // and the shell's own authenticate reply never reaches her.
    let mut raw = raw_with_bearer(&daemon.url, TOKEN_A).await;
    // She is signed in before her first frame, so what her handshake names
    // is hers to read.
    let mut handshake = initialize_params("ops-alice-raw");
    handshake["initialSubscriptions"] = json!([ROOT_RESOURCE_URI, sid]);
    let init = raw_request(&mut raw, 1, "initialize", handshake).await.expect("initialize reply");
    let shown: Vec<&str> = init["result"]["snapshots"].as_array().into_iter().flatten().filter_map(|s| s["resource"].as_str()).collect();
    assert_eq!(shown, [ROOT_RESOURCE_URI, sid.as_str()], "{init}");
    let reply = raw_request(&mut raw, 2, "disposeSession", json!({ "channel": sid })).await.expect("dispose reply");
    assert_eq!(reply["error"]["code"], -32009, "{reply}");
    assert_eq!(reply["error"]["message"], "Only the session's owner can delete it.", "{reply}");

    // A wrong bearer token: refused on the HTTP upgrade with 401 and a
    // reason, never upgraded.
    let mut request = daemon.url.as_str().into_client_request().expect("request");
    request.headers_mut().insert("Authorization", format!("Bearer {TOKEN_WRONG}").parse().expect("header value"));
    match within("connect with a wrong token", tokio_tungstenite::connect_async(request)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status().as_u16(), 401);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned();
            assert!(body.contains("bearer token matches no user"), "{body}");
            assert!(response.headers().get("www-authenticate").is_some(), "{response:?}");
        }
        other => panic!("a wrong bearer token was upgraded: {:?}", other.map(|(_, r)| r.status())),
    }

    // The owner may.
    let r: Value = within("bob dispose", bob.request("disposeSession", params())).await.expect("bob disposes");
    assert_eq!(r, Value::Null);

    for c in [&bob, &anon, &alice] {
        c.shutdown().await;
    }
    let log = std::fs::read_to_string(log_path(&data)).unwrap_or_default();
    assert!(log.contains("client.auth_failed"), "the wrong token is logged (without its value):\n{log}");
    for token in [TOKEN_A, TOKEN_B, TOKEN_WRONG] {
        assert!(!log.contains(token), "a token's value is in the log");
    }
}

// ---------------------------------------------------------------------------
// SIGTERM during a write storm
// ---------------------------------------------------------------------------

const STORM_UPDATES: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_write_storm_exits_0_and_keeps_every_acknowledged_write() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "ops-storm").await;
    let (sid, chat, mut ssub, _cs, mut csub) = new_session(&c).await;
    turn(&c, &chat, &mut csub, "t1", "hello").await;

    // Count own echoes (acknowledged writes) as they come; remember the
    // last acknowledged title index.
    let acks = Arc::new(AtomicUsize::new(0));
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let collector = {
        let (acks, last) = (acks.clone(), last.clone());
        tokio::spawn(async move {
            loop {
                match tokio::time::timeout(Duration::from_millis(500), ssub.recv()).await {
                    Ok(Some(SubscriptionEvent::Action(env))) => {
                        let own = env.origin.as_ref().is_some_and(|o| o.client_id == "ops-storm");
                        if let (true, None, StateAction::SessionTitleChanged(a)) = (own, &env.rejection_reason, &env.action) {
                            if let Some(i) = a.title.strip_prefix("storm-").and_then(|n| n.parse::<usize>().ok()) {
                                last.store(i, Ordering::SeqCst);
                                acks.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return,
                }
            }
        })
    };
    let sender = {
        let (c, sid) = (c.clone(), sid.clone());
        tokio::spawn(async move {
            for i in 0..STORM_UPDATES {
                let action = StateAction::SessionTitleChanged(SessionTitleChangedAction { title: format!("storm-{i}") });
                if c.dispatch(sid.clone(), action).await.is_err() {
                    break;
                }
            }
        })
    };
    let waited = Instant::now();
    while acks.load(Ordering::SeqCst) < STORM_UPDATES / 4 {
        assert!(waited.elapsed() < STEP, "only {} echoes arrived", acks.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let status = daemon.terminate();
    assert!(status.success(), "ahpd exited with {status:?} after SIGTERM");
    let _ = within("sender", sender).await;
    let _ = within("collector", collector).await;
    c.shutdown().await;
    let last_acked = last.load(Ordering::SeqCst);
    assert_ne!(last_acked, usize::MAX);
    let log = std::fs::read_to_string(log_path(&data)).unwrap_or_default();
    assert!(log.contains("SIGTERM") && log.contains("stopped"), "no orderly stop in the log:\n{log}");

    // Restart: the title is the last acknowledged one or a later one.
    let daemon = Daemon::start(&data);
    let c = connect_init(&daemon.url, "ops-storm-check").await.0;
    let (state, _sub) = subscribe_session(&c, &sid).await;
    let restored = state.title.strip_prefix("storm-").and_then(|n| n.parse::<usize>().ok());
    assert!(
        restored.is_some_and(|i| i >= last_acked),
        "restored title {:?}, but storm-{last_acked} was acknowledged",
        state.title
    );
    c.shutdown().await;
}

/// A local program that reads the host's own token from the data dir
/// (`host-token`, mode 0600) is `root:<host>`: it may delete anybody's
/// session, and the token's value never reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_token_makes_a_root_connection() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let users = write_users(tmp.path());
    let data = tmp.path().join("data");
    let daemon = Daemon::start_with(&data, &["--users", users.to_str().expect("utf-8")]);
    let token_file = data.join("host-token");
    let token = std::fs::read_to_string(&token_file).expect("the daemon made its host token").trim().to_owned();
    assert_eq!(std::fs::metadata(&token_file).expect("stat").permissions().mode() & 0o777, 0o600);

    let (bob, _, _root) = connect_init(&daemon.url, "root-bob").await;
    authenticate(&bob, TOKEN_B).await.expect("bob authenticates");
    let (sid, _chat, _ssub, _cs, _csub) = new_session(&bob).await;

    let (host, _, _r) = connect_init(&daemon.url, "root-local").await;
    authenticate(&host, &token).await.expect("the host token authenticates");
    let r: Value = within("root dispose", host.request("disposeSession", DisposeSessionParams { channel: sid.clone(), meta: None }))
        .await
        .expect("root may delete anybody's session");
    assert_eq!(r, Value::Null);
    let log = daemon.log_text();
    assert!(log.contains("is root:"), "the log names the root principal");
    assert!(!log.contains(&token), "the host token's value is never logged");
}

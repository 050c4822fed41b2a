//! `bench_catalogue`: the catalogue's figures for `docs/PERFORMANCE.md`
//! (issue 4's benchmark). Not a test: it prints numbers and judges nothing.
//!
//! - `scan`: a cold pass over generated Claude Code transcripts (10k files,
//!   one of 100 MB) with the daemon's own scan code (`exec/claude.rs`,
//!   compiled in here as a module), against reading the same bounded
//!   head+tail bytes with plain file reads; and the peak RSS of the pass.
//!   "Cold" means the page cache is dropped before each pass when this
//!   process may write `/proc/sys/vm/drop_caches` (root); otherwise the
//!   passes are warm and the output says so.
//! - `host`: a core `Host` built with 100k records: the time to answer a
//!   500-row `listSessions` page through `Host::handle` with a JSON frame
//!   (and the reply's text), against `serde_json`-encoding the same 500
//!   `SessionSummary`s alone; and the memory per catalogue row.
//!
//! Run (release): `cargo run --release -p ahpd --bin bench_catalogue`.
//! The scan part runs first so its peak RSS is not the host part's; the
//! host part then runs in a fresh process of its own.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[path = "../exec/claude.rs"]
#[allow(dead_code)]
mod claude;

use std::fs::{self, File};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ahp_types::state::SessionSummary;
use ahpd_core::transcript::{HEAD_BYTES, TAIL_BYTES};
use ahpd_core::{ChatRecord, Config, ConnId, Effect, Host, Input, MonoTime, Now, Outbound, SessionRecord, WallTime};
use clap::Parser;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "bench_catalogue", about = "Prints the catalogue's performance figures.")]
struct Args {
    /// Which part to run: `scan`, `host` or `all`.
    #[arg(long, default_value = "all")]
    part: String,
    /// Catalogue rows for the host part.
    #[arg(long, default_value_t = 100_000)]
    rows: usize,
    /// Transcripts for the scan part, the big one included.
    #[arg(long, default_value_t = 10_000)]
    files: usize,
    /// Size of the big transcript, in MB.
    #[arg(long, default_value_t = 100)]
    big_mb: u64,
    /// Timed repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Where to generate the transcripts (kept when given, else a fresh
    /// folder under the temp dir, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the page cache warm (do not drop it before each pass).
    #[arg(long)]
    warm: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runs = args.runs.max(1);
    if matches!(args.part.as_str(), "scan" | "all") {
        if let Err(e) = bench_scan(&args, runs) {
            eprintln!("bench_catalogue: scan part failed: {e}");
            return ExitCode::FAILURE;
        }
    }
    match args.part.as_str() {
        "host" => bench_host(args.rows, runs),
        // In a fresh process, so the memory per row is not measured on top
        // of what the scan part left in this one.
        "all" => {
            let child = std::env::current_exe().and_then(|exe| {
                std::process::Command::new(exe)
                    .args(["--part", "host", "--rows", &args.rows.to_string(), "--runs", &runs.to_string()])
                    .status()
            });
            if !child.as_ref().is_ok_and(|s| s.success()) {
                eprintln!("bench_catalogue: host part failed: {child:?}");
                return ExitCode::FAILURE;
            }
        }
        _ => {}
    }
    ExitCode::SUCCESS
}

// ---------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs.get(xs.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Resident set size now, in bytes (`/proc/self/statm`, second field).
fn rss_bytes() -> u64 {
    let pages = fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    pages * 4096
}

/// A field of `/proc/self/status` in kB (`VmHWM`, `VmRSS`).
fn status_kb(field: &str) -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        })
        .unwrap_or(0)
}

/// Drops the page cache (needs root); whether it could.
fn drop_caches() -> bool {
    let synced = std::process::Command::new("sync").status().is_ok_and(|s| s.success());
    synced && fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

// ---------------------------------------------------------------------------
// Scan part
// ---------------------------------------------------------------------------

/// A small deterministic generator (xorshift).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn iso(ms: i64) -> String {
    WallTime(ms).to_iso()
}

/// Writes one transcript of about `size` bytes: a first prompt with its
/// cwd, then assistant/user/progress/tool-result lines of mixed lengths.
fn write_transcript(path: &Path, size: u64, g: &mut Gen, custom_title: Option<&str>) -> std::io::Result<u64> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let cwd = format!("/home/dev/projects/app_{}", g.next() % 300);
    let base = 1_767_225_600_000i64 + (g.next() % 10_000_000) as i64;
    let mut written = 0u64;
    let first = serde_json::json!({
        "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": cwd,
        "sessionId": "s", "version": "2.0.0", "gitBranch": "main", "type": "user",
        "message": {"role": "user", "content": "Please refactor the parser so that errors carry their line numbers"},
        "uuid": "u0", "timestamp": iso(base)
    })
    .to_string();
    writeln!(out, "{first}")?;
    written += first.len() as u64 + 1;
    let filler: String = "lorem ipsum dolor sit amet, consectetur adipiscing elit ".repeat(200);
    let mut i = 1i64;
    while written < size {
        let ts = iso(base + i * 1000);
        let len = match g.next() % 10 {
            0..=5 => 80 + (g.next() % 400) as usize,
            6..=8 => 1000 + (g.next() % 3000) as usize,
            _ => 3000 + (g.next() % 6000) as usize,
        };
        let text = &filler[..len.min(filler.len())];
        let line = match g.next() % 4 {
            0 => serde_json::json!({"parentUuid": "p", "isSidechain": false, "cwd": cwd, "sessionId": "s", "type": "assistant",
                "message": {"role": "assistant", "content": [{"type": "text", "text": text}], "usage": {"input_tokens": 10, "output_tokens": 20}},
                "uuid": format!("u{i}"), "timestamp": ts}),
            1 => serde_json::json!({"parentUuid": "p", "isSidechain": false, "cwd": cwd, "sessionId": "s", "type": "user",
                "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": text}]},
                "uuid": format!("u{i}"), "timestamp": ts}),
            _ => serde_json::json!({"type": "progress", "cwd": cwd, "sessionId": "s", "toolUseID": format!("t{i}"),
                "data": {"type": "bash_progress", "output": text}, "uuid": format!("u{i}"), "timestamp": ts}),
        }
        .to_string();
        writeln!(out, "{line}")?;
        written += line.len() as u64 + 1;
        i += 1;
    }
    if let Some(title) = custom_title {
        let line = serde_json::json!({"type": "custom-title", "customTitle": title, "sessionId": "s"}).to_string();
        writeln!(out, "{line}")?;
        written += line.len() as u64 + 1;
    }
    out.flush()?;
    Ok(written)
}

/// Generates `files` transcripts under `root` in 100 slug folders: 80% of
/// 2–16 KB, 18% of 64–256 KB, 2% of 0.5–2 MB, and one of `big_mb` MB.
fn generate(root: &Path, files: usize, big_mb: u64) -> std::io::Result<(u64, PathBuf)> {
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let mut total = 0u64;
    for s in 0..100 {
        fs::create_dir_all(root.join(format!("-home-dev-projects-app-{s}")))?;
    }
    let big = root.join("-home-dev-projects-app-0").join("ffffffff-0000-4000-8000-000000000000.jsonl");
    total += write_transcript(&big, big_mb * 1_000_000, &mut g, Some("Big one"))?;
    for n in 1..files {
        let size = match g.next() % 100 {
            0..=79 => 2_000 + g.next() % 14_000,
            80..=97 => 64_000 + g.next() % 192_000,
            _ => 500_000 + g.next() % 1_500_000,
        };
        let path = root.join(format!("-home-dev-projects-app-{}", n % 100)).join(format!("{:08x}-0000-4000-8000-{:012x}.jsonl", n, n));
        total += write_transcript(&path, size, &mut g, None)?;
    }
    Ok((total, big))
}

/// The baseline: the same walk, reading the same bounded head and tail
/// bytes with plain reads, parsing nothing. Returns files and bytes read.
fn plain_pass(root: &Path) -> std::io::Result<(usize, u64)> {
    let mut head = vec![0u8; HEAD_BYTES];
    let mut tail = vec![0u8; TAIL_BYTES];
    let (mut files, mut bytes) = (0usize, 0u64);
    for slug in fs::read_dir(root)? {
        let slug = slug?;
        if !slug.file_type()?.is_dir() {
            continue;
        }
        for entry in fs::read_dir(slug.path())? {
            let entry = entry?;
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("jsonl") || !entry.file_type()?.is_file() {
                continue;
            }
            let mut f = File::open(&path)?;
            let len = f.metadata()?.len();
            let h = (len as usize).min(HEAD_BYTES);
            f.read_exact(&mut head[..h])?;
            bytes += h as u64;
            if len > HEAD_BYTES as u64 {
                let start = len.saturating_sub(TAIL_BYTES as u64).max(HEAD_BYTES as u64);
                f.seek(SeekFrom::Start(start))?;
                let t = (len - start) as usize;
                f.read_exact(&mut tail[..t])?;
                bytes += t as u64;
            }
            files += 1;
        }
    }
    Ok((files, bytes))
}

fn bench_scan(args: &Args, runs: usize) -> Result<(), String> {
    let (root, keep) = match &args.dir {
        Some(d) => (d.clone(), true),
        None => (std::env::temp_dir().join(format!("ahpd-bench-catalogue-{}", std::process::id())), false),
    };
    let generated = root.join("projects");
    let started = Instant::now();
    let reuse = keep && generated.is_dir();
    if !reuse {
        fs::create_dir_all(&generated).map_err(|e| format!("mkdir {}: {e}", generated.display()))?;
        let (total, big) = generate(&generated, args.files, args.big_mb).map_err(|e| format!("generate: {e}"))?;
        println!(
            "scan: generated {} transcripts, {:.0} MB in all (big one {} MB at {}), in {:.1} s",
            args.files,
            total as f64 / 1e6,
            fs::metadata(&big).map(|m| m.len() / 1_000_000).unwrap_or(0),
            big.display(),
            started.elapsed().as_secs_f64()
        );
    } else {
        println!("scan: reusing the transcripts under {}", generated.display());
    }
    let hwm_before = status_kb("VmHWM:");
    let mut cold = true;
    let (mut plain, mut scan, mut single) = (Vec::new(), Vec::new(), Vec::new());
    let mut plain_bytes = 0;
    let mut rows = 0;
    let mut big_title = String::new();
    let drop = || !args.warm && drop_caches();
    for _ in 0..runs {
        cold &= drop();
        let t = Instant::now();
        let (files, bytes) = plain_pass(&generated).map_err(|e| format!("plain pass: {e}"))?;
        plain.push(t.elapsed());
        plain_bytes = bytes;
        cold &= drop();
        let t = Instant::now();
        let report = claude::scan(&generated)?;
        scan.push(t.elapsed());
        rows = report.rows.len();
        if files != report.files || report.refused + report.unreadable > 0 {
            return Err(format!("passes disagree: plain saw {files} files, the scan {} ({} refused, {} unreadable)", report.files, report.refused, report.unreadable));
        }
        big_title = report.rows.iter().find(|r| r.conversation_id.starts_with("ffffffff")).map(|r| r.title.clone()).unwrap_or_default();
        cold &= drop();
        let t = Instant::now();
        let report = claude::scan_on_one_thread(&generated)?;
        single.push(t.elapsed());
        if report.rows.len() != rows {
            return Err(format!("the one-thread pass found {} rows, the scan {rows}", report.rows.len()));
        }
    }
    let hwm = status_kb("VmHWM:");
    let spread = |xs: &[Duration]| {
        let lo = xs.iter().min().copied().unwrap_or_default();
        let hi = xs.iter().max().copied().unwrap_or_default();
        format!("{:.0}..{:.0} ms", ms(lo), ms(hi))
    };
    let (p_spread, s_spread, one_spread) = (spread(&plain), spread(&scan), spread(&single));
    let (p, s, one) = (median(plain), median(scan), median(single));
    println!("scan: {} passes each, page cache {}", runs, if cold { "dropped before every pass (cold)" } else { "NOT dropped (warm: --warm, or not root)" });
    println!("scan: plain head+tail reads:      {:.1} ms median ({p_spread}; {:.1} MB read)", ms(p), plain_bytes as f64 / 1e6);
    println!("scan: ahpd claude scan:           {:.1} ms median ({s_spread}; {rows} rows; the big one titled {big_title:?})", ms(s));
    println!("scan: the same, on one thread:    {:.1} ms median ({one_spread})", ms(one));
    println!(
        "scan: ratio scan/plain = {:.2}x (goal <= 2x); one thread/plain = {:.2}x",
        s.as_secs_f64() / p.as_secs_f64().max(1e-9),
        one.as_secs_f64() / p.as_secs_f64().max(1e-9)
    );
    println!("scan: peak RSS (VmHWM) {:.1} MB (before the passes {:.1} MB; goal <= 100 MB)", hwm as f64 / 1024.0, hwm_before as f64 / 1024.0);
    if !keep {
        let _ = fs::remove_dir_all(&root);
    }
    let rows = claude::scan(&generated).map(|r| r.rows).unwrap_or_default();
    bench_merge(rows);
    Ok(())
}

/// The core's side of a cold start: a host with no records takes one scan's
/// rows (every one external) and answers the first 500-row page.
fn bench_merge(rows: Vec<ahpd_core::ScannedRow>) {
    let newest = rows.iter().map(|r| r.modified_at).max().unwrap_or_default();
    let now = Now { mono: MonoTime(0), wall: WallTime(newest.0 + 3_600_000) };
    let config = Config {
        external_sources: vec![claude::PROVIDER.to_owned()],
        show_external_sessions: ahpd_core::external::ExternalMode::Last30Days,
        ..Config::default()
    };
    let mut host = Host::new(config, 7, Vec::new(), now);
    let conn = ConnId(1);
    let effects = host.handle(now, Input::Connected { conn });
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://","protocolVersions":["1.0.0"],"clientId":"bench"}}"#;
    let _ = host.handle(now, Input::Frame { conn, text: init.to_owned() });
    let Some(op) = effects.iter().find_map(|e| match e {
        Effect::Scan { op, provider } if provider == claude::PROVIDER => Some(*op),
        _ => None,
    }) else {
        println!("merge: the host asked for no claude scan");
        return;
    };
    let n = rows.len();
    let again = rows.clone();
    let t = Instant::now();
    let _ = host.handle(now, Input::Done { op, outcome: ahpd_core::Outcome::Scanned { rows, damaged: Vec::new() } });
    let (now, slices, longest) = merge_to_end(&mut host, now);
    let merged = t.elapsed();
    println!("merge: {slices} slices (ticks a millisecond apart after the input that brought the pass), the longest tick {:.2} ms", ms(longest));
    let frame = r#"{"jsonrpc":"2.0","id":2,"method":"listSessions","params":{"channel":"ahp-root://","limit":500}}"#;
    let t = Instant::now();
    let effects = host.handle(now, Input::Frame { conn, text: frame.to_owned() });
    let text = reply_text(&effects, 2).unwrap_or_default();
    let page = t.elapsed();
    let listed = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["result"]["items"].as_array().map(Vec::len)).unwrap_or(0);
    println!("merge: the core took {n} scanned rows in {:.0} ms; the first page ({listed} rows) then took {:.1} ms", ms(merged), ms(page));
    // A refresh: a listing once the last pass is stale starts another
    // behind its answer; the same rows come back.
    let later = Now { mono: now.mono.plus_ms(Config::default().scan_interval_ms + 1), wall: now.wall };
    let effects = host.handle(later, Input::Frame { conn, text: frame.replace("\"id\":2", "\"id\":3") });
    let Some(op) = effects.iter().find_map(|e| match e {
        Effect::Scan { op, provider } if provider == claude::PROVIDER => Some(*op),
        _ => None,
    }) else {
        println!("merge: no refresh was started");
        return;
    };
    let t = Instant::now();
    let _ = host.handle(later, Input::Done { op, outcome: ahpd_core::Outcome::Scanned { rows: again, damaged: Vec::new() } });
    let (_, slices, longest) = merge_to_end(&mut host, later);
    println!("merge: a refresh bringing the same {n} rows back took the core {:.0} ms in {slices} slices, the longest tick {:.2} ms", ms(t.elapsed()), ms(longest));
}

/// Ticks `host` a millisecond apart until the pass it is merging is merged
/// (issue 21: a slice a tick); returns the time then, the slices (the input
/// that brought the pass included) and the longest input.
fn merge_to_end(host: &mut Host, mut now: Now) -> (Now, usize, Duration) {
    let mut slices = 1;
    let mut longest = Duration::ZERO;
    while host.view().merging_scan() {
        now.mono = now.mono.plus_ms(1);
        let t = Instant::now();
        let _ = host.handle(now, Input::Tick);
        longest = longest.max(t.elapsed());
        slices += 1;
    }
    (now, slices, longest)
}

// ---------------------------------------------------------------------------
// Host part
// ---------------------------------------------------------------------------

fn record(i: usize, base_ms: i64) -> SessionRecord {
    let key = format!("ahp-session@bench-{i:06}");
    let created = iso(base_ms + i as i64 * 1000);
    let modified = iso(base_ms + i as i64 * 1000 + (i as i64 % 97) * 60_000);
    SessionRecord {
        format: ahpd_core::record::RECORD_FORMAT,
        key: ahpd_core::record::Derived::held(key.clone()),
        resource: format!("ahp-session:/bench-{i:06}"),
        provider: "echo".into(),
        title: format!("Refactor the parser so errors carry line numbers ({i})").into(),
        created_at: created.into(),
        modified_at: modified.as_str().into(),
        is_read: i.is_multiple_of(3),
        is_archived: i.is_multiple_of(7),
        working_directories: vec![format!("file:///home/dev/projects/app_{}", i % 300)].into(),
        config: Default::default(),
        owner: None,
        scope: None,
        default_chat: ahpd_core::record::Derived::held(format!("ahp-chat:/{key}")),
        chats: vec![ChatRecord {
            resource: format!("ahp-chat:/{key}"),
            title: Box::default(),
            conversation_id: key.into(),
            modified_at: modified.into(),
            status: 1,
            fresh: false,
            damaged: false,
            senders: Default::default(),
            changes: None,
            written: Default::default(),
            kept: Default::default(),
            draft: None,
            forgetting: Default::default(),
            origin: None,
            seed: Default::default(),
            queued: Default::default(),
            steering: None,
            moved: None,
        }],
        changes: None,
        external: false,
        offer: None,
        in_tree: None,
        shared_trees: Default::default(),
        deleted: false,
        tools: None,
        git: None,
    }
}

/// The text of the reply to request `id` among `effects`, if any.
fn reply_text(effects: &[Effect], id: u64) -> Option<String> {
    effects.iter().find_map(|e| match e {
        Effect::Send { message: m @ Outbound::Result { id: rid, .. }, .. } if *rid == id => Some(m.to_json()),
        Effect::Send { message: m @ Outbound::Error { id: Some(rid), .. }, .. } if *rid == id => Some(m.to_json()),
        _ => None,
    })
}

fn bench_host(rows: usize, runs: usize) {
    let base_ms = 1_767_225_600_000i64;
    let now = Now { mono: MonoTime(0), wall: WallTime(base_ms + rows as i64 * 1000 + 86_400_000) };
    let rss_before = rss_bytes();
    let t = Instant::now();
    let records: Vec<SessionRecord> = (0..rows).map(|i| record(i, base_ms)).collect();
    let made = t.elapsed();
    let rss_records = rss_bytes();
    let t = Instant::now();
    let mut host = Host::new(Config::default(), 7, records, now);
    let built = t.elapsed();
    let rss_after = rss_bytes();
    let per_row = (rss_after.saturating_sub(rss_before)) as f64 / rows.max(1) as f64;
    println!("host: {rows} records made in {:.0} ms, then Host::new took {:.0} ms", ms(made), ms(built));
    println!(
        "host: RSS {:.1} MB before, {:.1} MB with the records, {:.1} MB after Host::new: {:.0} bytes per catalogue row",
        rss_before as f64 / 1e6,
        rss_records as f64 / 1e6,
        rss_after as f64 / 1e6,
        per_row
    );
    println!(
        "host: size_of Session {} bytes, SessionRecord {} bytes, ChatRecord {} bytes (inline, before any heap text)",
        std::mem::size_of::<ahpd_core::session::Session>(),
        std::mem::size_of::<SessionRecord>(),
        std::mem::size_of::<ChatRecord>()
    );
    println!(
        "host: of a Session, inline: Resident {} bytes, Parked {} bytes, SessionSummary {} bytes, Phase {} bytes",
        std::mem::size_of::<ahpd_core::session::Resident>(),
        std::mem::size_of::<ahpd_core::session::Parked>(),
        std::mem::size_of::<SessionSummary>(),
        std::mem::size_of::<ahpd_core::session::Phase>()
    );

    let conn = ConnId(1);
    let _ = host.handle(now, Input::Connected { conn });
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://","protocolVersions":["1.0.0"],"clientId":"bench"}}"#;
    let _ = host.handle(now, Input::Frame { conn, text: init.to_owned() });

    // The first page and a page from the middle of the catalogue.
    let mut next_id = 10u64;
    let mut page = |host: &mut Host, cursor: Option<&str>| -> (Duration, Duration, String) {
        next_id += 1;
        let id = next_id;
        let params = match cursor {
            Some(c) => serde_json::json!({"channel": "ahp-root://", "limit": 500, "cursor": c}),
            None => serde_json::json!({"channel": "ahp-root://", "limit": 500}),
        };
        let frame = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "listSessions", "params": params}).to_string();
        let t = Instant::now();
        let effects = host.handle(now, Input::Frame { conn, text: frame });
        let handled = t.elapsed();
        let text = reply_text(&effects, id).unwrap_or_default();
        let total = t.elapsed();
        (handled, total, text)
    };
    let (_, _, first) = page(&mut host, None);
    let first_json: serde_json::Value = serde_json::from_str(&first).unwrap_or_default();
    let items: Vec<SessionSummary> = serde_json::from_value(first_json["result"]["items"].clone()).unwrap_or_default();
    let mut cursor = first_json["result"]["nextCursor"].as_str().map(str::to_owned);
    for _ in 0..(rows / 500 / 2).saturating_sub(1) {
        let (_, _, text) = page(&mut host, cursor.as_deref());
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        cursor = v["result"]["nextCursor"].as_str().map(str::to_owned);
    }
    let middle_cursor = cursor;

    let n = runs.max(5) * 20;
    let (mut handle_top, mut total_top, mut total_mid) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let (h, t, _) = page(&mut host, None);
        handle_top.push(h);
        total_top.push(t);
        let (_, t, _) = page(&mut host, middle_cursor.as_deref());
        total_mid.push(t);
    }
    let mut encode = Vec::new();
    let mut encoded_len = 0;
    for _ in 0..n {
        let t = Instant::now();
        let text = serde_json::to_string(&items).unwrap_or_default();
        encode.push(t.elapsed());
        encoded_len = text.len();
    }
    // The floor every input pays at this size, whatever it is: a tick, and
    // the driver's `next_deadline` after each input.
    let mut tick = Vec::new();
    let mut deadline = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let _ = host.handle(now, Input::Tick);
        tick.push(t.elapsed());
        let t = Instant::now();
        let _ = host.next_deadline();
        deadline.push(t.elapsed());
    }
    // Where a page's time goes, piece by piece: walking the ordered index
    // and reading each row's session by its slot, then building each row's owned
    // `SessionSummary`.
    let view = host.view();
    let (mut walk, mut build) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let sessions: Vec<&ahpd_core::session::Session> =
            view.catalogue.walk_borrowed(None).take(501).filter_map(|(_, uri, slot)| view.sessions.at(slot, uri)).collect();
        walk.push(t.elapsed());
        let t = Instant::now();
        let summaries: Vec<SessionSummary> = sessions.iter().take(500).map(|s| s.summary()).collect();
        build.push(t.elapsed());
        std::hint::black_box(summaries);
    }
    let (ht, tt, tm, enc) = (median(handle_top), median(total_top), median(total_mid), median(encode));
    println!("host: {} items in the page, {} bytes encoded alone; medians of {n}", items.len(), encoded_len);
    println!("host: listSessions first page:  handle {:.3} ms, handle + reply text {:.3} ms", ms(ht), ms(tt));
    println!("host: listSessions middle page: handle + reply text {:.3} ms", ms(tm));
    println!("host: serde_json of the 500 SessionSummary alone: {:.3} ms", ms(enc));
    println!(
        "host: ratio page/encode = {:.2}x first page, {:.2}x middle page (goal <= 2x)",
        tt.as_secs_f64() / enc.as_secs_f64().max(1e-9),
        tm.as_secs_f64() / enc.as_secs_f64().max(1e-9)
    );
    println!(
        "host: of a page: index walk + session reads by slot {:.3} ms, building the 500 owned summaries {:.3} ms",
        ms(median(walk)),
        ms(median(build))
    );
    println!(
        "host: per-input floor at this size: handle(Tick) {:.3} ms, next_deadline {:.3} ms",
        ms(median(tick)),
        ms(median(deadline))
    );
}

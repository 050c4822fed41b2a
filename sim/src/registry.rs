//! The workspace-awareness registry directory as the shell's executor
//! (`shell/src/exec/registry.rs`) sees it (issue 10, spec 004), shared by
//! this host and by simulated agents of other processes on the machine.
//!
//! - `RegistryCmd::Publish` writes this host's record file, `Remove`
//!   deletes one of the files this host process published (never another
//!   process's), `Scan` answers `Outcome::RegistryScanned` with every record
//!   file in name order, what the process table shows of the pid each names
//!   (`awareness::peek_pid`, as the shell does), and the repository of each
//!   asked directory.
//! - Commands run in issue order and are answered in that order after a
//!   latency (the shell runs them on one task).
//! - Foreign peers live in the simulated folders (`/work/a`, `/work/b`, ...):
//!   at every scan each may join, change its activity, status or claims
//!   (meaningful changes), refresh only its heartbeat stamp (noise), leave
//!   cleanly, die leaving its record behind (its pid is gone), have its pid
//!   taken by another process (pid reuse), leave a half-written record, or
//!   write hostile characters. Some run on another machine (judged by age).
//! - A scan fails under the `registry_fail` fault: the host's
//!   `session_awareness_error` path.
//!
//! The model keeps, per scan, the truth the checkers compare the host's
//! peers with ([`ScanTruth`]): every well-formed record file whose writer
//! still runs.

use std::collections::BTreeMap;
use std::fmt;

use ahpd_core::awareness::{self, ActiveRecord, AwarenessConfig, ProcessObservation, RegistryFile, RepoObservation, Tier, RECORD_VERSION};
use ahpd_core::{Input, OpId, Outcome, RegistryCmd};

use crate::queue::Queue;
use crate::rng::{SimRng, Stream};

/// The host name every simulated process of this machine writes.
pub const HOST_NAME: &str = "sim";
/// The host name of peers on another machine (judged by age alone).
pub const OTHER_HOST: &str = "elsewhere";
/// Mixed into the run seed for the awareness streams, so that awareness
/// draws never shift another stream's values.
const AWARENESS_SALT: u64 = 0xA3A5_5EED_0004_0001;

/// Awareness knobs of one seed (drawn from their own stream).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AwarenessOptions {
    /// Whether the host publishes and scans at all (the daemon's default is
    /// on: most seeds).
    pub enabled: bool,
    /// The core's heartbeat period, ms.
    pub heartbeat_ms: u64,
    /// Foreign peer slots (agents of other processes in the same folders).
    pub foreign_peers: usize,
    /// Probability, per scan and per foreign peer, that it does something
    /// besides refreshing its heartbeat.
    pub churn: f64,
    /// Weights of the tier a created session asks for: no key (the
    /// default, warn), `passive`, `warn`, `coordinate`.
    pub tiers: [u64; 4],
    /// Probability that a created session asks for `autoApprove: true`.
    pub auto_approve: f64,
    /// Probability that a tool call declares the paths it writes
    /// (`_meta["ahpd.writes"]`) and waits for the host's word.
    pub write_tools: f64,
    /// Mean latency of a registry command, ms.
    pub registry_ms: u64,
    /// Probability that a scan fails (the safety phase's fault).
    pub registry_fail: f64,
    /// The core's least gap between two scans' starts, ms (0: none).
    pub scan_gap_ms: u64,
}

impl AwarenessOptions {
    /// The awareness knobs of `seed`.
    pub fn from_seed(seed: u64) -> AwarenessOptions {
        let mut rng = SimRng::new(seed ^ AWARENESS_SALT, Stream::Options);
        let enabled = rng.chance(0.85);
        let tiers = match rng.below(5) {
            0 => [0, 1, 0, 0],
            1 => [0, 0, 1, 0],
            2 => [0, 0, 0, 1],
            _ => [1, 1, 1, 2],
        };
        let mut options = AwarenessOptions {
            enabled,
            heartbeat_ms: if rng.chance(0.2) { 5_000 } else { rng.range(400, 4_000) },
            foreign_peers: rng.range(0, 5) as usize,
            churn: 0.05 + 0.5 * rng.unit(),
            tiers,
            auto_approve: if rng.chance(0.5) { 0.0 } else { 0.3 },
            write_tools: if rng.chance(0.2) { 0.0 } else { 0.3 + 0.6 * rng.unit() },
            registry_ms: rng.range(1, 30),
            registry_fail: if rng.chance(0.4) { 0.0 } else { 0.02 + 0.2 * rng.unit() },
            scan_gap_ms: 0,
        };
        // Drawn last, so the knobs above keep their values seed for seed.
        options.scan_gap_ms = match rng.below(4) {
            0 => 0,
            1 => 250,
            _ => rng.range(20, 1_000),
        };
        options
    }

    /// The core's awareness settings (the first host process's pid).
    pub fn config(&self) -> AwarenessConfig {
        AwarenessConfig {
            enabled: self.enabled,
            pid: FIRST_HOST_PID,
            pid_start: FIRST_HOST_START,
            heartbeat_ms: self.heartbeat_ms,
            scan_gap_ms: self.scan_gap_ms,
        }
    }

    /// The session config a client asks for at creation (workload stream).
    pub fn session_config(&self, rng: &mut SimRng) -> serde_json::Map<String, serde_json::Value> {
        let mut config = serde_json::Map::new();
        if !self.enabled {
            return config;
        }
        let tier = match rng.weighted(&self.tiers) {
            1 => Some(Tier::Passive),
            2 => Some(Tier::Warn),
            3 => Some(Tier::Coordinate),
            _ => None,
        };
        if let Some(t) = tier {
            config.insert(awareness::TIER_KEY.to_owned(), t.name().into());
        }
        if rng.chance(self.auto_approve) {
            config.insert(awareness::AUTO_APPROVE_KEY.to_owned(), true.into());
        }
        config
    }
}

impl fmt::Display for AwarenessOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "awareness: enabled={} heartbeat={}ms foreign_peers={} churn={:.2} tiers(default/passive/warn/coordinate)={:?} auto_approve={:.2} write_tools={:.2} registry={}ms scan_gap={}ms",
            self.enabled, self.heartbeat_ms, self.foreign_peers, self.churn, self.tiers, self.auto_approve, self.write_tools, self.registry_ms, self.scan_gap_ms
        )
    }
}

/// The host's first process id and start time.
pub const FIRST_HOST_PID: u32 = 4_000;
const FIRST_HOST_START: u64 = 1_000;

/// The folders simulated sessions and peers work in (absolute paths); the
/// clients' `workingDirectories` are the first two.
const FOLDERS: [&[&str]; 6] = [&["/work/a"], &["/work/b"], &["/work/a", "/work/b"], &["/work/a/src"], &["/work"], &["/elsewhere"]];

/// The paths agents write, relative to `/work/a` (the first folder of the
/// clients' sessions), and absolute ones in `/work/b`.
pub const WRITE_PATHS: [&str; 5] = ["src/f0.ts", "src/f1.ts", "src/f2.ts", "README.md", "/work/b/notes.md"];

/// What one scan saw, as the checkers judge it: every well-formed record
/// file whose writer still runs (a writer on another machine counts as
/// running), and the repositories answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanTruth {
    /// The records, in file-name order.
    pub live: Vec<ActiveRecord>,
    /// The repository answered for each asked directory.
    pub repos: BTreeMap<String, Option<RepoObservation>>,
    /// The scan failed.
    pub failed: bool,
}

/// A foreign agent (another process's session) in one slot.
#[derive(Debug, Clone, PartialEq)]
struct Peer {
    /// Its record as last written, while it has one.
    record: Option<ActiveRecord>,
    /// Its record file's name.
    name: String,
    /// Joins so far (each join is a new session URI).
    joins: u64,
}

/// Counters of what the registry did (for the run summary's log).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryStats {
    /// Scans answered.
    pub scans: u64,
    /// Scans failed on purpose.
    pub scan_failures: u64,
    /// Foreign joins.
    pub joins: u64,
    /// Foreign meaningful updates.
    pub updates: u64,
    /// Foreign clean leaves.
    pub leaves: u64,
    /// Foreign deaths (records left behind).
    pub deaths: u64,
}

/// The simulated registry directory and process table.
#[derive(Debug, Clone)]
pub struct Registry {
    opts: AwarenessOptions,
    rng: SimRng,
    /// Record files: name → bytes, and the record they hold when they are
    /// one (kept to spare the checkers a parse).
    files: BTreeMap<String, (Vec<u8>, Option<ActiveRecord>)>,
    /// Running processes: pid → start time.
    procs: BTreeMap<u32, u64>,
    peers: Vec<Peer>,
    /// Files the current host process published (the only ones it
    /// removes), with the session each is about.
    own: BTreeMap<String, String>,
    host_pid: u32,
    host_start: u64,
    next_pid: u32,
    /// Records left by dead processes, oldest first (capped).
    leftovers: Vec<String>,
    /// HEAD of each simulated repository root.
    heads: BTreeMap<String, u64>,
    last_due: u64,
    truth: BTreeMap<OpId, ScanTruth>,
    /// Counters.
    pub stats: RegistryStats,
}

impl Registry {
    /// An empty registry for `seed`'s options; the host's first process
    /// runs.
    pub fn new(seed: u64, opts: AwarenessOptions) -> Registry {
        let mut rng = SimRng::new(seed ^ AWARENESS_SALT, Stream::World);
        let mut files = BTreeMap::new();
        // Junk some other tool left: a half-written record, sometimes an
        // oversized one.
        if opts.enabled && rng.chance(0.5) {
            files.insert("100-half.json".to_owned(), (br#"{"pid":"#.to_vec(), None));
        }
        if opts.enabled && rng.chance(0.1) {
            files.insert("101-huge.json".to_owned(), (vec![b' '; awareness::RECORD_MAX_BYTES + 1], None));
        }
        Registry {
            opts,
            rng,
            files,
            procs: [(FIRST_HOST_PID, FIRST_HOST_START)].into(),
            peers: (0..opts.foreign_peers).map(|_| Peer { record: None, name: String::new(), joins: 0 }).collect(),
            own: BTreeMap::new(),
            host_pid: FIRST_HOST_PID,
            host_start: FIRST_HOST_START,
            next_pid: 5_000,
            leftovers: Vec::new(),
            heads: BTreeMap::new(),
            last_due: 0,
            truth: BTreeMap::new(),
            stats: RegistryStats::default(),
        }
    }

    /// The current host process's pid and start time.
    pub fn host_process(&self) -> (u32, u64) {
        (self.host_pid, self.host_start)
    }

    /// The host process died and a new one starts: the old one's records
    /// stay behind (stale: its pid is gone, or now belongs to another
    /// process). Returns the new process's pid and start time.
    pub fn on_host_crash(&mut self) -> (u32, u64) {
        self.procs.remove(&self.host_pid);
        self.own.clear();
        self.truth.clear();
        let start = self.host_start + 1 + self.rng.below(1_000);
        if self.rng.chance(0.3) {
            // The pid is reused by the new process (another start time).
        } else {
            self.host_pid = self.fresh_pid();
        }
        self.host_start = start;
        self.procs.insert(self.host_pid, start);
        (self.host_pid, self.host_start)
    }

    fn fresh_pid(&mut self) -> u32 {
        self.next_pid += 1 + self.rng.below(50) as u32;
        self.next_pid
    }

    /// The record files the current host process has in the directory:
    /// name → the session it is about.
    pub fn own_files(&self) -> &BTreeMap<String, String> {
        &self.own
    }

    /// The record the current host process published for `session`, if any.
    pub fn own_record(&self, session: &str) -> Option<ActiveRecord> {
        self.own
            .iter()
            .filter(|(_, s)| s.as_str() == session)
            .filter_map(|(n, _)| self.files.get(n))
            .find_map(|(_, r)| r.clone())
    }

    /// Whether `op` is a scan whose answer is still to reach the host.
    pub fn is_scan(&self, op: OpId) -> bool {
        self.truth.contains_key(&op)
    }

    /// Takes what the scan `op` saw, once its answer reaches the host.
    pub fn take_truth(&mut self, op: OpId) -> Option<ScanTruth> {
        self.truth.remove(&op)
    }

    /// Executes one `Effect::Registry` at wall time `wall_ms`; the answer
    /// is queued after the previous one. `fail` is the scan fault's
    /// probability now.
    pub fn on_command(&mut self, q: &mut Queue, wall_ms: i64, fail: f64, op: OpId, command: RegistryCmd) {
        let (outcome, label) = match command {
            RegistryCmd::Publish { name, record } => {
                self.own.insert(name.clone(), record.session.clone());
                self.write(name, *record);
                (Outcome::Ok, "published")
            }
            RegistryCmd::Remove { name } => {
                // Never another process's record (the shell's rule).
                if self.own.remove(&name).is_some() {
                    self.files.remove(&name);
                }
                (Outcome::Ok, "removed")
            }
            RegistryCmd::Scan { dirs } => {
                self.churn(wall_ms);
                if self.rng.chance(fail) {
                    self.stats.scan_failures += 1;
                    self.truth.insert(op, ScanTruth { failed: true, ..ScanTruth::default() });
                    (Outcome::Failed { message: "simulated: the registry directory could not be listed (EIO)".to_owned() }, "registry failed")
                } else {
                    self.stats.scans += 1;
                    let (files, truth) = self.scan(&dirs);
                    let repos = truth.repos.clone();
                    self.truth.insert(op, truth);
                    (Outcome::RegistryScanned { files, repos }, "registry scanned")
                }
            }
        };
        let due = (q.now + self.rng.exp_ms(self.opts.registry_ms)).max(self.last_due);
        self.last_due = due;
        q.to_host(None, due - q.now, Input::Done { op, outcome }, format!("done op{} {label}", op.0));
    }

    fn observe(&self, pid: u32) -> ProcessObservation {
        match self.procs.get(&pid) {
            Some(start) => ProcessObservation { pid, alive: true, start: Some(*start) },
            None => ProcessObservation { pid, alive: false, start: None },
        }
    }

    /// The repository a directory is in: `/work/repo<N>` and below are
    /// working trees on `main` (the simulated git of other options may
    /// add them); anything else is in none.
    fn repository(&mut self, dir: &str) -> Option<RepoObservation> {
        let rest = dir.strip_prefix("/work/repo")?;
        let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if n.is_empty() || !(rest.len() == n.len() || rest[n.len()..].starts_with('/')) {
            return None;
        }
        let root = format!("/work/repo{n}");
        let head = self.heads.entry(root.clone()).or_insert(1);
        Some(RepoObservation { root, branch: Some("main".to_owned()), head: Some(format!("{:040x}", *head)) })
    }

    fn scan(&mut self, dirs: &[String]) -> (Vec<RegistryFile>, ScanTruth) {
        let mut files = Vec::new();
        let mut live = Vec::new();
        for (name, (bytes, record)) in &self.files {
            let process = match record {
                Some(r) => Some(self.observe(r.pid)),
                None => awareness::peek_pid(bytes).map(|p| self.observe(p)),
            };
            files.push(RegistryFile { name: name.clone(), bytes: bytes.clone(), process });
            let Some(record) = record.clone() else { continue };
            let running = record.host != HOST_NAME || self.procs.get(&record.pid) == Some(&record.pid_start);
            if running {
                live.push(record);
            }
        }
        let repos = dirs.iter().map(|d| (d.clone(), self.repository(d))).collect();
        (files, ScanTruth { live, repos, failed: false })
    }

    /// What foreign peers do between two scans.
    fn churn(&mut self, wall_ms: i64) {
        // HEAD moves now and then under a repository (repository drift).
        let roots: Vec<String> = self.heads.keys().cloned().collect();
        for root in roots {
            if self.rng.chance(0.02) {
                *self.heads.entry(root).or_default() += 1;
            }
        }
        for slot in 0..self.peers.len() {
            let acts = self.rng.chance(self.opts.churn);
            match self.peers[slot].record.clone() {
                None if acts => self.join(slot, wall_ms),
                None => {}
                Some(mut record) => {
                    record.updated_at = wall_ms;
                    if acts {
                        match self.rng.below(10) {
                            0 => {
                                record.activity = ["editing", "running tests", "", "thinking"][self.rng.below(4) as usize].to_owned();
                                self.stats.updates += 1;
                            }
                            1 => {
                                // Hostile characters a reader must strip.
                                record.activity = "edit\u{1b}]0;pwned\u{7}ing \u{202E}txt".to_owned();
                                self.stats.updates += 1;
                            }
                            2 | 3 => {
                                record.claims = self.claims();
                                self.stats.updates += 1;
                            }
                            4 => {
                                record.status = [1, 8, 16][self.rng.below(3) as usize];
                                self.stats.updates += 1;
                            }
                            5 => {
                                self.stats.leaves += 1;
                                let name = std::mem::take(&mut self.peers[slot].name);
                                self.files.remove(&name);
                                self.procs.remove(&record.pid);
                                self.peers[slot].record = None;
                                continue;
                            }
                            6 => {
                                // The process dies (or its pid is taken by
                                // another): the record stays behind.
                                self.stats.deaths += 1;
                                if self.rng.chance(0.5) {
                                    self.procs.remove(&record.pid);
                                } else {
                                    self.procs.insert(record.pid, record.pid_start + 7);
                                }
                                let name = std::mem::take(&mut self.peers[slot].name);
                                self.leftover(name);
                                self.peers[slot].record = None;
                                continue;
                            }
                            7 => {
                                // Caught half-written: unreadable this scan.
                                if record.host == HOST_NAME {
                                    let name = self.peers[slot].name.clone();
                                    self.files.insert(name, (format!("{{\"pid\":{},", record.pid).into_bytes(), None));
                                    self.peers[slot].record = Some(record);
                                    continue;
                                }
                            }
                            _ => {}
                        }
                    }
                    let name = self.peers[slot].name.clone();
                    self.write(name, record.clone());
                    self.peers[slot].record = Some(record);
                }
            }
        }
    }

    /// Writes `record` as the file `name` (a whole record: writes are
    /// atomic).
    fn write(&mut self, name: String, record: ActiveRecord) {
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        self.files.insert(name, (bytes, Some(record)));
    }

    fn claims(&mut self) -> Vec<String> {
        let all = ["/work/a/src/f0.ts", "/work/a/src/f1.ts", "/work/a/src", "/work/a/README.md", "/work/b/notes.md", "/elsewhere/x"];
        let mut claims: Vec<String> = all.iter().filter(|_| self.rng.chance(0.3)).map(|s| (*s).to_owned()).collect();
        claims.sort();
        claims
    }

    fn leftover(&mut self, name: String) {
        self.leftovers.push(name);
        // Some tool cleans up its own old records now and then: keep at
        // most four leftovers.
        if self.leftovers.len() > 4 {
            let old = self.leftovers.remove(0);
            self.files.remove(&old);
        }
    }

    fn join(&mut self, slot: usize, wall_ms: i64) {
        self.stats.joins += 1;
        let pid = self.fresh_pid();
        let start = 10_000 + self.rng.below(100_000);
        let remote = self.rng.chance(0.15);
        if !remote {
            self.procs.insert(pid, start);
        }
        self.peers[slot].joins += 1;
        let joins = self.peers[slot].joins;
        let dirs = FOLDERS[self.rng.below(FOLDERS.len() as u64) as usize];
        let session = if self.rng.chance(0.5) { format!("ahp-session:/peer{slot}-{joins}") } else { format!("autohand:/agent-{slot}-{joins}") };
        let claims = self.claims();
        let record = ActiveRecord {
            version: RECORD_VERSION,
            session,
            host: if remote { OTHER_HOST } else { HOST_NAME }.to_owned(),
            pid,
            pid_start: start,
            working_directories: dirs.iter().map(|d| (*d).to_owned()).collect(),
            repository: None,
            branch: None,
            head: None,
            status: 1,
            activity: String::new(),
            claims,
            updated_at: wall_ms,
        };
        let name = format!("{pid}-peer{slot}.json");
        self.write(name.clone(), record.clone());
        self.peers[slot].name = name;
        self.peers[slot].record = Some(record);
    }
}

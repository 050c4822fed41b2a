//! The world: the host, its clients, backend and store, the event heap and
//! the clock. Each step pops the earliest of the heap and the host's
//! deadline, advances simulated time, calls `Host::handle` and routes the
//! effects (docs/STYLE.md 3.6).

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use ahp_types::Uri;
use ahpd_core::host::Stats;
use ahpd_core::{Config, ConnId, Effect, Host, Input, MonoTime, Now, OpId, Outcome, StoreCmd, WallTime};

use crate::backend::{self, Backend};
use crate::checkers::{self, Before, History, PreCrash};
use crate::checkers::trees::TreesChecker;
use crate::clients::{Client, ClientCtx, ClientOut};
use crate::git::GitWorld;
use crate::options::{Faults, Options};
use crate::queue::{Event, Lane, Queue};
use crate::registry::Registry;
use crate::rng::{Fnv, SimRng, Stream};
use crate::store::Store;
use crate::trace::Trace;
use crate::wire::Sent;
use crate::Failure;

/// Wall-clock time at the start of every run: 2026-01-01T00:00:00Z.
pub const EPOCH_WALL_MS: i64 = 1_767_225_600_000;

/// Which part of the run the world is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPhase {
    /// Faults on, workload on.
    Safety,
    /// Faults off, no new work: everything must settle within the budget.
    Liveness,
    /// Settled; the run is over.
    Finished,
}

/// How a step went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// More to do.
    Running,
    /// The run is over and every check passed.
    Finished,
}

/// Knobs of a run that are not drawn from the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunConfig {
    /// Keep every trace line (for `target/sim-failures/<seed>.log`).
    pub keep_trace: bool,
    /// Fold every input and effect into a rolling hash.
    pub hash: bool,
    /// Override the safety phase's step count.
    pub safety_steps: Option<u64>,
    /// Check the incremental checks against whole ones after every step
    /// (`--verify-incremental`): every session an input did not report
    /// touched (`SessionTable::touched`) equals its copy from before the
    /// input, and every quiescent mirror equals the host's state, stale or
    /// not. Slower; for a range in CI and for changes to the checkers.
    pub verify_incremental: bool,
}

/// Totals of a finished run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// The seed.
    pub seed: u64,
    /// Steps taken.
    pub steps: u64,
    /// Simulated time, ms.
    pub sim_ms: u64,
    /// Host counters summed over every incarnation.
    pub stats: Stats,
    /// Host crashes.
    pub crashes: u64,
    /// Turns the backend completed.
    pub turns_completed: u64,
    /// Requests clients sent.
    pub requests: u64,
    /// Envelopes clients applied to mirrors.
    pub applied: u64,
    /// Page walks completed.
    pub walks: u64,
    /// Mirrors compared equal to the host's state (rule 3), over all steps.
    pub mirror_checks: u64,
    /// The rolling hash of every input and effect (0 when not hashing).
    pub hash: u64,
    /// How many times the host logged each event (a coarse coverage map:
    /// `session.rediscovered`, `session.resume_failed`, ...).
    pub log_events: BTreeMap<&'static str, u64>,
    /// How many times each coverage mark of the core was hit
    /// (`ahpd_core::marks`; the list a range must hit is `sim::marks`).
    pub marks: BTreeMap<&'static str, u64>,
}

/// Adds `b`'s counters into `a`.
pub fn add_stats(a: &mut Stats, b: &Stats) {
    a.sleeps += b.sleeps;
    a.evictions += b.evictions;
    a.wakes += b.wakes;
    a.failed_resumes += b.failed_resumes;
    a.stale_ops += b.stale_ops;
    a.stale_events += b.stale_events;
    a.rejections += b.rejections;
}

/// The simulated world of one seed.
pub struct World {
    /// The scenario.
    pub options: Options,
    config: Config,
    host: Host,
    q: Queue,
    workload: SimRng,
    faults_rng: SimRng,
    world_rng: SimRng,
    core_rng: SimRng,
    clients: Vec<Client>,
    backend: Backend,
    store: Store,
    history: History,
    trace: Trace,
    phase: RunPhase,
    faults: Faults,
    steps: u64,
    liveness_start: u64,
    host_epoch: u64,
    wall_offset: i64,
    next_conn: u64,
    conn_owner: BTreeMap<ConnId, usize>,
    op_subject: BTreeMap<OpId, Uri>,
    stats_before: Stats,
    crashes: u64,
    hash: Option<Fnv>,
    mirror_checks: u64,
    /// Clients whose catalogue rows were compared with a fresh listing.
    row_checks: u64,
    /// Session configs as snapshots carry them, for the mirror checks.
    configs: checkers::ConfigCache,
    /// Per client, the mirrors to compare with the host's state at its next
    /// quiescent point (`checkers::Stale`).
    stale: Vec<checkers::Stale>,
    /// Per client, the listing its rows last matched (`checkers::check_rows`).
    rows_agreed: Vec<Option<String>>,
    /// Whose mirrors this step may have moved: the check after it compares
    /// only those (a mirror's match with the host changes only when the host
    /// took an input or the client took a frame).
    mirror_scope: MirrorScope,
    /// A graceful stop is under way: the world restarts the host once it
    /// has drained and the store has finished its writes.
    stopping: bool,
    safety_steps: u64,
    verbose: bool,
    verify_incremental: bool,
    scan_ops: std::collections::BTreeSet<OpId>,
    log_events: BTreeMap<&'static str, u64>,
    /// When the host last said a connection's frames were refused over its
    /// rate (`limit.rate`, host monotonic ms), by connection: the checker
    /// `rate_refusals_summarised` (issue 25).
    rate_lines: BTreeMap<ConnId, MonoTime>,
    marks: BTreeMap<&'static str, u64>,
    grants: checkers::grants::Grants,
    residency: checkers::residency::Residency,
    registry: Registry,
    aware: checkers::awareness::AwarenessChecker,
    /// The simulated machine's git, and its checker.
    git: GitWorld,
    trees: TreesChecker,
    /// The folder each chat's agent was started in (where its turns write).
    chat_dirs: BTreeMap<Uri, String>,
    /// The texts of the wakes' and tool messages' turns handed to agents
    /// (`on_agent_command`): each at most once.
    tool_turns: std::collections::BTreeSet<String>,
    /// Host tool calls the core has not answered yet (a child is made
    /// before its call is answered): each answered once, and only a call
    /// that was made.
    tool_calls_open: std::collections::BTreeSet<ahpd_core::HostCallId>,
    /// The `childFinished` turns handed to parents' agents, as (child,
    /// turn end number): each at most once (`child_finished_once`).
    child_finishes: std::collections::BTreeSet<(String, u64)>,
    /// The simulated machine's filesystem (issue 48, `files.rs`), what is
    /// outside every session folder as the run started, and the markers
    /// no frame may carry.
    fs: ahpd_core::files::memfs::MemFs,
    fs_outside: Vec<(String, ahpd_core::files::memfs::Node)>,
    fs_markers: Vec<String>,
}

impl World {
    /// Builds the world of `seed`: options from its options stream, a host
    /// with an empty store, clients that connect within the first moments.
    pub fn new(seed: u64, run: RunConfig) -> World {
        World::with_options(Options::from_seed(seed), run)
    }

    /// Builds the world of explicit swarm options (e.g. chosen by a fuzz
    /// target); the random streams are still those of `options.seed`.
    pub fn with_options(options: Options, run: RunConfig) -> World {
        let seed = options.seed;
        // The core's marks are counted per thread: start this seed's count
        // afresh (one world at a time runs on a thread).
        let _ = ahpd_core::marks::take();
        let config = options.config();
        let options_awareness = options.awareness;
        let mut core_rng = SimRng::new(seed, Stream::Core);
        let (users, residency_limit) = (options.users.is_some(), options.residency_limit);
        let host = Host::new(config.clone(), core_rng.next_u64(), Vec::new(), Now { mono: MonoTime(0), wall: WallTime(EPOCH_WALL_MS) });
        let git = GitWorld::new(options.git.repos, options.git.remote_default_dev, options.git.detached);
        let mut world = World {
            safety_steps: run.safety_steps.unwrap_or(options.safety_steps),
            faults: options.faults.clone(),
            clients: (0..options.clients).map(|i| crate::users::client(i, &options)).collect(),
            options,
            config,
            host,
            q: Queue::default(),
            workload: SimRng::new(seed, Stream::Workload),
            faults_rng: SimRng::new(seed, Stream::Faults),
            world_rng: SimRng::new(seed, Stream::World),
            core_rng,
            backend: Backend::default(),
            store: Store::default(),
            history: History::default(),
            trace: Trace::new(run.keep_trace),
            phase: RunPhase::Safety,
            steps: 0,
            liveness_start: 0,
            host_epoch: 0,
            wall_offset: 0,
            next_conn: 0,
            conn_owner: BTreeMap::new(),
            op_subject: BTreeMap::new(),
            stats_before: Stats::default(),
            crashes: 0,
            hash: run.hash.then(Fnv::default),
            mirror_checks: 0,
            row_checks: 0,
            configs: checkers::ConfigCache::default(),
            stale: Vec::new(),
            rows_agreed: Vec::new(),
            mirror_scope: MirrorScope::All,
            stopping: false,
            verbose: run.keep_trace,
            verify_incremental: run.verify_incremental,
            scan_ops: Default::default(),
            log_events: BTreeMap::new(),
            rate_lines: BTreeMap::new(),
            marks: BTreeMap::new(),
            grants: checkers::grants::Grants::new(users),
            residency: checkers::residency::Residency::new(residency_limit),
            registry: Registry::new(seed, options_awareness),
            aware: Default::default(),
            git,
            // Issue 19 (a tree removed while another session works in it)
            // is known broken: its rule runs only when asked for.
            trees: TreesChecker::new(),
            chat_dirs: BTreeMap::new(),
            tool_turns: std::collections::BTreeSet::new(),
            tool_calls_open: std::collections::BTreeSet::new(),
            child_finishes: std::collections::BTreeSet::new(),
            fs: crate::files::machine(),
            fs_outside: Vec::new(),
            fs_markers: crate::files::markers(),
        };
        world.fs_outside = crate::files::outside(&world.fs);
        world.stale = vec![checkers::Stale::All; world.clients.len()];
        world.rows_agreed = vec![None; world.clients.len()];
        let _ = world.history.on_host_start(&world.host.view());
        world.grants.on_host_start(&world.host.view());
        world.residency.on_host_start(&world.host.view());
        for client in 0..world.clients.len() {
            let delay = world.workload.range(0, 50);
            world.q.push(delay, Event::Reconnect { client });
        }
        if let Some(mean) = world.faults.host_crash_mean_ms {
            let d = world.faults_rng.exp_ms(mean);
            world.q.push(d, Event::HostCrash);
        }
        if let Some(mean) = world.faults.wall_jump_mean_ms {
            let d = world.faults_rng.exp_ms(mean);
            world.q.push(d, Event::WallJump);
        }
        world
    }

    /// The host's clock reading now.
    fn now_host(&self) -> Now {
        Now {
            mono: MonoTime(self.q.now - self.host_epoch),
            wall: WallTime(EPOCH_WALL_MS + self.q.now as i64 + self.wall_offset),
        }
    }

    /// The phase the run is in.
    pub fn phase(&self) -> RunPhase {
        self.phase
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The trace so far.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The host, read-only.
    pub fn host(&self) -> &Host {
        &self.host
    }

    fn failure(&self, rule: &str, detail: String) -> Failure {
        Failure {
            rule: rule.to_owned(),
            detail,
            seed: self.options.seed,
            step: self.steps,
            sim_ms: self.q.now,
            options: self.options.to_string(),
            trace: self.trace.last(),
        }
    }

    fn violation(&self, v: ahpd_core::invariants::Violation) -> Failure {
        self.failure(v.rule, v.detail)
    }

    /// Runs to the end: the safety phase, heal, then liveness until settled.
    pub fn run(&mut self) -> Result<Summary, Failure> {
        while self.step()? == Progress::Running {}
        self.take_marks();
        Ok(self.summary())
    }

    /// Moves the marks this thread counted since the last call into the
    /// world's own.
    fn take_marks(&mut self) {
        for (name, n) in ahpd_core::marks::take() {
            *self.marks.entry(name).or_default() += n;
        }
    }

    /// Runs at most `steps` steps (or to the end, whichever comes first).
    pub fn run_steps(&mut self, steps: u64) -> Result<Progress, Failure> {
        for _ in 0..steps {
            if self.step()? == Progress::Finished {
                return Ok(Progress::Finished);
            }
        }
        Ok(Progress::Running)
    }

    /// The totals so far.
    pub fn summary(&self) -> Summary {
        let mut stats = self.stats_before.clone();
        add_stats(&mut stats, self.host.view().stats);
        Summary {
            seed: self.options.seed,
            steps: self.steps,
            sim_ms: self.q.now,
            stats,
            crashes: self.crashes,
            turns_completed: self.backend.stats.turns_completed,
            requests: self.clients.iter().map(|c| c.stats.requests).sum(),
            applied: self.clients.iter().map(|c| c.stats.applied).sum(),
            walks: self.clients.iter().map(|c| c.stats.walks).sum(),
            mirror_checks: self.mirror_checks,
            hash: self.hash.map_or(0, |h| h.0),
            log_events: {
                // The world's own checkers, beside the host's events.
                let mut events = self.log_events.clone();
                events.insert("sim.grant_refusals_judged", self.grants.refusals_judged);
                events.insert("sim.owner_refusals_judged", self.grants.owner_refusals_judged);
                events.insert("sim.creations_judged", self.grants.creations_judged);
                events.insert("sim.let_go_judged", self.residency.let_go_judged);
                events.insert("sim.root_rows_compared", self.row_checks);
                events.insert("sim.store.with_next_answered", self.store.stats.with_next);
                events.insert("sim.store.with_next_lost_at_crash", self.store.stats.with_next_lost);
                events.insert("sim.backend.transcripts_damaged", self.backend.stats.transcripts_damaged);
                events.insert("sim.backend.transcripts_restored", self.backend.stats.transcripts_restored);
                events.insert("sim.lru_victims_judged", self.residency.victims_judged);
                let (r, a) = (&self.registry.stats, &self.aware.stats);
                for (name, n) in [
                    ("sim.registry.scans", r.scans),
                    ("sim.registry.scan_failures", r.scan_failures),
                    ("sim.registry.foreign_joins", r.joins),
                    ("sim.registry.foreign_updates", r.updates),
                    ("sim.registry.foreign_leaves", r.leaves),
                    ("sim.registry.foreign_deaths", r.deaths),
                    ("sim.awareness.peer_sets_checked", a.peer_sets),
                    ("sim.awareness.nonempty_peer_sets", a.nonempty_peer_sets),
                    ("sim.awareness.writes_vetted", a.writes),
                    ("sim.awareness.writes_held", a.held),
                ] {
                    if n > 0 {
                        events.insert(name, n);
                    }
                }
                events
            },
            marks: self.marks.clone(),
        }
    }

    /// One step: the earliest of the heap and the host's deadline.
    pub fn step(&mut self) -> Result<Progress, Failure> {
        if self.phase == RunPhase::Finished {
            return Ok(Progress::Finished);
        }
        if self.phase == RunPhase::Safety && self.steps >= self.safety_steps {
            self.heal();
        }
        self.steps += 1;
        self.mirror_scope = MirrorScope::Unchanged;
        let event_due = self.q.peek_due();
        let deadline = self.host.next_deadline().map(|m| self.host_epoch + m.0);
        match (deadline, event_due) {
            (Some(d), e) if e.is_none_or(|e| d < e) => {
                self.q.now = self.q.now.max(d);
                self.feed(Input::Tick, "tick".to_owned())?;
            }
            (_, Some(_)) => {
                let Some((due, event)) = self.q.pop() else { unreachable!("peeked") };
                self.q.now = self.q.now.max(due);
                self.on_event(event)?;
            }
            (_, None) => {}
        }
        let only = match self.mirror_scope {
            MirrorScope::Unchanged => Some(None),
            MirrorScope::One(client) => Some(Some(client)),
            MirrorScope::All => None,
        };
        self.mirror_checks += checkers::check_mirrors(&self.host.view(), &self.clients, &self.q, &mut self.configs, &mut self.stale).map_err(|v| self.violation(v))?;
        if self.verify_incremental {
            let mut every = vec![checkers::Stale::All; self.clients.len()];
            checkers::check_mirrors(&self.host.view(), &self.clients, &self.q, &mut self.configs, &mut every).map_err(|v| self.violation(v))?;
        }
        if only != Some(None) {
            let clients = match only {
                Some(Some(client)) => &self.clients[client..=client],
                _ => &self.clients[..],
            };
            let agreed = match only {
                Some(Some(client)) => &mut self.rows_agreed[client..=client],
                _ => &mut self.rows_agreed[..],
            };
            self.row_checks += checkers::check_rows(&self.host.view(), clients, &self.q, agreed).map_err(|v| self.violation(v))?;
        }
        if self.stopping && self.host.drained() && !self.store.writes_in_flight() {
            // Drained and every write answered: the store's stop makes the
            // writes answered before they were durable durable (the shell's
            // checkpoint), and the process exits and starts again.
            self.store.on_graceful_stop();
            self.stopping = false;
            self.crash()?;
        }
        if self.phase == RunPhase::Liveness && !self.stopping {
            let pending = checkers::pending(&self.host.view(), &self.clients, &self.q);
            if pending.is_empty() {
                self.phase = RunPhase::Finished;
                self.trace.note(self.steps, self.q.now, "settled");
                return Ok(Progress::Finished);
            }
            let stuck = !self.q.has_work() && self.host.next_deadline().is_none();
            if stuck || self.steps - self.liveness_start > self.options.liveness_steps {
                let mut detail = pending;
                detail.extend(self.backend.describe());
                return Err(self.failure("liveness_settles", format!(
                    "not settled {} steps into the liveness phase{}:\n    {}",
                    self.steps - self.liveness_start,
                    if stuck { " (nothing left to run)" } else { "" },
                    detail.join("\n    ")
                )));
            }
        }
        Ok(Progress::Running)
    }

    /// Faults off, busy agents wind down, clients stop starting new work.
    fn heal(&mut self) {
        self.phase = RunPhase::Liveness;
        self.liveness_start = self.steps;
        self.faults = Faults::none();
        self.trace.note(self.steps, self.q.now, "heal: faults off, liveness phase");
        let faults = self.faults.clone();
        let wall_ms = self.now_host().wall.0;
        let mut cx = backend::Ctx { q: &mut self.q, world: &mut self.world_rng, faults_rng: &mut self.faults_rng, faults: &faults, options: &self.options, wall_ms };
        self.backend.heal(&mut cx);
    }

    fn on_event(&mut self, event: Event) -> Result<(), Failure> {
        self.mirror_scope = match (&event, self.mirror_scope) {
            (Event::Deliver { client, .. }, MirrorScope::Unchanged) => MirrorScope::One(*client),
            (Event::Deliver { client, .. }, MirrorScope::One(c)) if c == *client => MirrorScope::One(c),
            (Event::Think { .. } | Event::AgentStep { .. } | Event::StoreAck { .. } | Event::WallJump, scope) => scope,
            _ => MirrorScope::All,
        };
        match event {
            Event::Host { incarnation, input, label, sent } => {
                if self.verbose {
                    if let Input::Frame { conn, text } = &*input {
                        self.trace.note(self.steps, self.q.now, &format!("  <- conn{} {}", conn.0, text.chars().take(300).collect::<String>()));
                    }
                }
                if incarnation == self.q.incarnation {
                    self.feed_read(*input, label, sent)?;
                }
            }
            Event::Deliver { client, conn, text } => {
                let ctx = ClientCtx {
                    session_ids: self.options.session_ids,
                    oneshot: self.options.non_resumable_agent,
                    list_limit_max: self.options.list_limit_max,
                    incarnations: &self.history.incarnations,
                    awareness: self.options.awareness,
                    git: &self.options.git,
                    automations: self.options.automations,
                };
                let outs = self.clients[client].on_frame(conn, &text, &ctx, &mut self.workload).map_err(|v| self.violation(v))?;
                self.stale[client].all();
                self.rows_agreed[client] = None;
                self.client_out(client, outs);
            }
            Event::CloseConn { client, conn } => {
                if self.clients[client].conn == Some(conn) {
                    self.clients[client].on_closed();
                    self.q.to_host(Some(Lane::ToHost(conn)), 0, Input::Disconnected { conn }, format!("closed c{client}"));
                    let d = self.workload.exp_ms(200);
                    self.q.push(d, Event::Reconnect { client });
                }
            }
            Event::Think { client } => {
                if self.phase != RunPhase::Safety {
                    return Ok(());
                }
                let conn = self.clients[client].conn;
                if conn.is_some() && self.faults_rng.chance(self.faults.client_disconnect) {
                    self.client_out(client, vec![ClientOut::Disconnect]);
                } else {
                    let ctx = ClientCtx {
                        session_ids: self.options.session_ids,
                        oneshot: self.options.non_resumable_agent,
                    list_limit_max: self.options.list_limit_max,
                        incarnations: &self.history.incarnations,
                        awareness: self.options.awareness,
                        git: &self.options.git,
                        automations: self.options.automations,
                    };
                    let outs = self.clients[client].think(&mut self.workload, &ctx);
                    self.client_out(client, outs);
                }
                if self.clients[client].conn.is_some() {
                    let d = self.workload.exp_ms(self.options.think_ms);
                    self.q.push(d, Event::Think { client });
                }
            }
            Event::Reconnect { client } => {
                if self.clients[client].conn.is_some() {
                    return Ok(());
                }
                self.next_conn += 1;
                let conn = ConnId(self.next_conn);
                self.conn_owner.insert(conn, client);
                self.q.to_host(Some(Lane::ToHost(conn)), 0, Input::Connected { conn }, format!("connect c{client}"));
                let outs = self.clients[client].on_connected(conn, &mut self.workload);
                self.client_out(client, outs);
                if self.phase == RunPhase::Safety {
                    let d = self.workload.exp_ms(self.options.think_ms);
                    self.q.push(d, Event::Think { client });
                }
            }
            Event::AgentStep { chat, gen } => {
                let faults = self.faults.clone();
                let wall_ms = self.now_host().wall.0;
                let mut cx = backend::Ctx { q: &mut self.q, world: &mut self.world_rng, faults_rng: &mut self.faults_rng, faults: &faults, options: &self.options, wall_ms };
                if let Some((input, label)) = self.backend.on_step(&mut cx, &chat, gen) {
                    self.feed(input, label)?;
                }
            }
            Event::StoreAck { id } => {
                if let Some((input, label)) = self.store.on_ack(id) {
                    // The first write of a move to another session landed
                    // (the chat is durable in two records): the process may
                    // die before it hears so, and the second write is never
                    // issued (docs/DECISIONS.md, 17).
                    let between_move_writes = self.phase == RunPhase::Safety
                        && !self.stopping
                        && self.faults.host_crash_mean_ms.is_some()
                        && self.faults.crash_between_move_writes > 0.0
                        && matches!(input, Input::Done { outcome: Outcome::Ok, .. })
                        && self.store.chat_in_two_records();
                    if between_move_writes && self.faults_rng.chance(self.faults.crash_between_move_writes) {
                        self.trace.note(self.steps, self.q.now, &format!("host crash between a move's two writes ({label})"));
                        let landed = self.store.last_landed.clone();
                        return self.crash_unheard(landed);
                    }
                    self.feed(input, label)?;
                }
            }
            Event::HostCrash => {
                if self.phase == RunPhase::Safety && !self.stopping {
                    // Half the stops are graceful (SIGTERM: the host drains,
                    // the store finishes its writes, then the process goes),
                    // half a crash mid-whatever (kill -9).
                    if self.faults_rng.chance(0.5) {
                        let grace_ms = self.faults_rng.range(0, 3_000);
                        self.stopping = true;
                        self.trace.note(self.steps, self.q.now, &format!("graceful stop: grace {grace_ms} ms"));
                        self.feed(Input::Shutdown { grace_ms }, "shutdown".to_owned())?;
                    } else {
                        self.crash()?;
                    }
                    if let Some(mean) = self.faults.host_crash_mean_ms {
                        let d = self.faults_rng.exp_ms(mean);
                        self.q.push(d, Event::HostCrash);
                    }
                }
            }
            Event::WallJump => {
                if self.phase == RunPhase::Safety {
                    let jump = self.faults_rng.range(0, 7_200_000) as i64 - 3_600_000;
                    self.wall_offset += jump;
                    self.trace.note(self.steps, self.q.now, &format!("wall clock jumps {jump:+} ms"));
                    if let Some(mean) = self.faults.wall_jump_mean_ms {
                        let d = self.faults_rng.exp_ms(mean);
                        self.q.push(d, Event::WallJump);
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends what a client wants sent.
    fn client_out(&mut self, client: usize, outs: Vec<ClientOut>) {
        for out in outs {
            let Some(conn) = self.clients[client].conn else { return };
            match out {
                ClientOut::Frame(text) => {
                    let delay = self.world_rng.exp_ms(self.options.net_ms);
                    // Read once here: the label, and the rules when the
                    // host takes it (`users_rules_before`).
                    let sent = Sent::parse(&text);
                    let label = sent.label(client);
                    self.q.to_host_read(Some(Lane::ToHost(conn)), delay, Input::Frame { conn, text }, label, Some(Box::new(sent)));
                }
                ClientOut::Disconnect => {
                    self.clients[client].on_closed();
                    self.q.to_host(Some(Lane::ToHost(conn)), 0, Input::Disconnected { conn }, format!("disconnect c{client}"));
                    let d = self.workload.exp_ms(300);
                    self.q.push(d, Event::Reconnect { client });
                }
            }
        }
    }

    /// The session an input is about, for the trace.
    fn subject(&self, input: &Input, label: &str) -> Option<Uri> {
        let view = self.host.view();
        let of = |uri: &str| -> Option<Uri> {
            if view.sessions.contains_key(uri) {
                Some(uri.to_owned())
            } else {
                view.chats.get(uri).map(|u| u.to_string())
            }
        };
        match input {
            Input::Done { op, .. } => self.op_subject.get(op).and_then(|u| of(u)).or_else(|| {
                // A git command is the work of the session holding it.
                view.sessions.iter().find(|(_, s)| s.work().git_ops.contains(op) || s.work().git_begin == Some(*op)).map(|(u, _)| u.clone())
            }),
            Input::Backend { chat, .. } => of(chat),
            Input::Frame { .. } => label.split_whitespace().nth(3).and_then(of),
            _ => None,
        }
    }

    /// Calls `Host::handle` and routes and checks what it returns.
    fn feed(&mut self, input: Input, label: String) -> Result<(), Failure> {
        self.feed_read(input, label, None)
    }

    /// [`World::feed`], with a client frame's keys when they were read as
    /// it was sent.
    fn feed_read(&mut self, input: Input, label: String, sent: Option<Box<Sent>>) -> Result<(), Failure> {
        self.mirror_scope = MirrorScope::All;
        let now = self.now_host();
        let subject = self.subject(&input, &label);
        let phase_of = |host: &Host| -> &'static str { subject.as_ref().and_then(|s| host.view().sessions.get(s).map(|s| s.phase().name())).unwrap_or("-") };
        let before_phase = phase_of(&self.host);
        let mut before: Before = self.history.before_step(&self.host.view());
        let (grants_before, residency_before) = self.users_rules_before(&input, &label, sent, subject.clone(), now);
        // A scan's answer may list sessions this host lost (rediscovered
        // from the backend's transcripts): they appear asleep, in the input
        // that brought the answer or in any while its merge goes on.
        let answers_scan = matches!(&input, Input::Done { op, .. } if self.scan_ops.remove(op));
        before.scan = answers_scan || self.host.view().merging_scan();
        let aware = self.config.awareness.enabled;
        let aware_before = if aware {
            let truth = match &input {
                Input::Done { op, .. } => self.registry.take_truth(*op),
                _ => None,
            };
            Some(self.aware.before_step(&self.host.view(), &input, truth))
        } else {
            None
        };
        if let Some(h) = &mut self.hash {
            h.write(format!("{} {:?} {:?}", self.q.now, now, input).as_bytes());
        }
        let done_op = match &input {
            Input::Done { op, .. } => Some(*op),
            _ => None,
        };
        let tool_call = match &input {
            Input::HostTool { call, tool, .. } => Some((*call, matches!(tool, ahpd_core::HostToolRequest::StartChildSession { .. }))),
            _ => None,
        };
        let sessions_before: Option<Vec<(Uri, ahpd_core::session::Session)>> =
            self.verify_incremental.then(|| self.host.view().sessions.iter().map(|(u, s)| (u.clone(), s.clone())).collect());
        // Every other frame goes in decoded, as the daemon's connection
        // readers hand them over (issue 25), with a looser bound than the
        // host's: both ways in must answer alike.
        let input = match input {
            Input::Frame { conn, text } if self.steps % 2 == 0 => {
                let frame = ahpd_core::protocol::codec::decode_bounded(&text, usize::MAX);
                Input::FrameDecoded { conn, bytes: text.len(), frame }
            }
            other => other,
        };
        let host = &mut self.host;
        let effects = match catch_unwind(AssertUnwindSafe(|| host.handle(now, input))) {
            Ok(effects) => effects,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "non-string panic".to_owned());
                self.trace.step(self.steps, now.mono.0, label, subject, before_phase, "PANIC", 0);
                return Err(self.failure("core_panic", message));
            }
        };
        if let Some(h) = &mut self.hash {
            for e in &effects {
                h.write(format!("{e:?}").as_bytes());
            }
        }
        if let Some(sessions_before) = sessions_before {
            checkers::verify_touched(&self.host.view(), &sessions_before).map_err(|v| self.violation(v))?;
        }
        // "Every host tool call gets exactly one answer" (issue 24): the
        // core answers a call once, and answers nothing else; in the input
        // that brought it, but for `start_child_session`, answered once its
        // child started (or would not).
        let answers: Vec<ahpd_core::HostCallId> = effects.iter().filter_map(|e| match e {
            Effect::HostToolAnswer { call, .. } => Some(*call),
            _ => None,
        }).collect();
        if let Some((call, deferred)) = tool_call {
            if !self.tool_calls_open.insert(call) {
                return Err(self.violation(ahpd_core::invariants::Violation { rule: "host_tool_answered_once", detail: format!("call {call:?} was made twice") }));
            }
            if !deferred && !answers.contains(&call) {
                return Err(self.violation(ahpd_core::invariants::Violation {
                    rule: "host_tool_answered_once",
                    detail: format!("call {call:?} was not answered in its input (answers {answers:?})"),
                }));
            }
        }
        for call in &answers {
            if !self.tool_calls_open.remove(call) {
                return Err(self.violation(ahpd_core::invariants::Violation {
                    rule: "host_tool_answered_once",
                    detail: format!("call {call:?} was answered again, or never made (answers {answers:?})"),
                }));
            }
        }
        let after_phase = phase_of(&self.host);
        self.trace.step(self.steps, now.mono.0, label, subject, before_phase, after_phase, effects.len());
        for effect in &effects {
            self.history.on_effect(effect).map_err(|v| self.violation(v))?;
        }
        self.grants.after_step(&self.host.view(), &grants_before, &effects).map_err(|v| self.violation(v))?;
        // Each message's wire text, written once: the residency rules read
        // the replies' and notifications' names in it, and clients get it.
        let mut texts: Vec<Option<String>> = effects.iter().map(|e| match e {
            Effect::Send { message, .. } => Some(message.to_json()),
            _ => None,
        }).collect();
        self.residency.after_step(&self.host.view(), &residency_before, &effects, &texts).map_err(|v| self.violation(v))?;
        if self.verbose {
            for effect in &effects {
                let text = match effect {
                    Effect::Send { conn, message } => format!("  -> conn{} {}", conn.0, message.to_json()),
                    Effect::Close { conn, .. } => format!("  -> close conn{}", conn.0),
                    Effect::Backend { op, chat, command, .. } => format!("  -> backend op{} {chat} {command:?}", op.0),
                    Effect::Store { op, command } => format!("  -> store op{} {}", op.0, match command {
                        StoreCmd::Put { record, .. } => format!(
                            "put {} read={} archived={} title={:?} kept={:?}",
                            record.key(),
                            record.is_read,
                            record.is_archived,
                            record.title,
                            record.chats.iter().flat_map(|c| c.kept.iter().map(|k| k.id.as_str())).collect::<Vec<_>>()
                        ),
                        StoreCmd::Delete { key } => format!("delete {key}"),
                        StoreCmd::PutAutomation { record } => format!("put automation {} enabled={} runs={}", record.resource, record.definition.enabled, record.runs.len()),
                        StoreCmd::DeleteAutomation { key } => format!("delete automation {key}"),
                    }),
                    Effect::Log(l) => format!("  -> log {} {:?} {}", l.event, l.session, l.detail),
                    Effect::Scan { op, provider } => format!("  -> scan op{} {provider}", op.0),
                    Effect::Git { op, command } => format!("  -> git op{} {command:?}", op.0),
                    Effect::Fs { op, command } => format!("  -> fs op{} {command:?}", op.0),
                    Effect::Registry { op, command } => format!("  -> registry op{} {command:?}", op.0),
                    Effect::HostToolAnswer { call, result } => format!("  -> host tool answer call{} {result:?}", call.0),
                    Effect::Release(_) => "  -> release".to_owned(),
                };
                self.trace.note(self.steps, now.mono.0, &text.chars().take(400).collect::<String>());
            }
        }
        // What the awareness rules read of the effects (the rest is routed
        // away below).
        let aware_effects: Vec<Effect> = if aware {
            effects
                .iter()
                .filter(|e| matches!(e, Effect::Log(_) | Effect::Backend { command: ahpd_core::BackendCmd::ConfirmTool { .. }, .. }))
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        for (effect, text) in effects.into_iter().zip(texts.iter_mut()) {
            self.route(effect, text.take())?;
        }
        {
            let view = self.host.view();
            let touched = view.sessions.touched();
            for stale in &mut self.stale {
                stale.touched(&view, touched.as_deref());
            }
        }
        self.history.after_step(&self.host.view(), &before).map_err(|v| self.violation(v))?;
        if let Some(b) = aware_before {
            self.aware.after_step(&self.host.view(), b, &aware_effects, &self.registry).map_err(|v| self.violation(v))?;
        }
        if let Some(op) = done_op {
            self.trees.after_done(&self.host.view(), op).map_err(|v| self.violation(v))?;
        }
        self.trees.after_step(&self.host.view()).map_err(|v| self.violation(v))?;
        Ok(())
    }

    /// The grants and residency rules' before-views of one input
    /// (`checkers/grants.rs`, `checkers/residency.rs`).
    fn users_rules_before(&mut self, input: &Input, label: &str, sent: Option<Box<Sent>>, subject: Option<Uri>, now: Now) -> (checkers::grants::GrantsBefore, checkers::residency::ResidencyBefore) {
        let view = self.host.view();
        // A wake is due by the wall clock, which may have jumped since the
        // deadline was derived (issue 24).
        let due = self.host.next_deadline().is_some_and(|d| d <= now.mono) || view.wall_clock_work_due(now.wall);
        let (frame, text) = match input {
            Input::Frame { conn, text } => {
                let frame = match sent {
                    Some(sent) => checkers::grants::Frame::of(*conn, *sent),
                    None => checkers::grants::Frame::parse(*conn, text),
                };
                (frame, text.as_str())
            }
            _ => (None, label),
        };
        let signer = frame.as_ref().and_then(|f| self.conn_owner.get(&f.conn)).and_then(|&c| self.clients[c].signer.as_ref());
        let subscribe = frame.as_ref().filter(|f| f.method == "subscribe").and_then(|f| Some((f.conn, f.id?, f.channel.clone())));
        let residency = self.residency.before_step(&view, text, subject, subscribe);
        (self.grants.before_step(&view, frame, signer, due), residency)
    }

    /// Executes one effect; `text` is a `Send`'s message as written on the
    /// wire.
    fn route(&mut self, effect: Effect, text: Option<String>) -> Result<(), Failure> {
        match effect {
            Effect::Send { conn, message } => {
                let Some(&client) = self.conn_owner.get(&conn) else { return Ok(()) };
                let text = text.unwrap_or_else(|| message.to_json());
                if let Err((rule, detail)) = crate::files::check_frame(&text, &self.fs_markers) {
                    return Err(self.violation(ahpd_core::invariants::Violation { rule, detail }));
                }
                if text.contains(backend::SERVER_PATH) {
                    return Err(self.violation(ahpd_core::invariants::Violation {
                        rule: "no_server_path_to_clients",
                        detail: format!("conn{} was sent the backend's server path: {text}", conn.0),
                    }));
                }
                let delay = self.world_rng.exp_ms(self.options.net_ms);
                self.q.push_lane(Lane::ToClient(conn), delay, Event::Deliver { client, conn, text });
            }
            Effect::Close { conn, .. } => {
                let Some(&client) = self.conn_owner.get(&conn) else { return Ok(()) };
                self.q.push_lane(Lane::ToClient(conn), 0, Event::CloseConn { client, conn });
            }
            Effect::Backend { op, provider, chat, command } => {
                self.op_subject.insert(op, chat.clone());
                self.on_agent_command(&chat, &command)?;
                let faults = self.faults.clone();
                let wall_ms = self.now_host().wall.0;
                let mut cx = backend::Ctx { q: &mut self.q, world: &mut self.world_rng, faults_rng: &mut self.faults_rng, faults: &faults, options: &self.options, wall_ms };
                self.backend.on_command(&mut cx, op, &provider, &chat, command);
            }
            Effect::Store { op, command } => {
                let subject = match &command {
                    StoreCmd::Put { record, .. } => record.resource.clone(),
                    StoreCmd::Delete { key } | StoreCmd::DeleteAutomation { key } => key.replacen('@', ":/", 1),
                    StoreCmd::PutAutomation { record } => record.resource.clone(),
                };
                self.op_subject.insert(op, subject);
                let store_fail = self.faults.store_fail;
                self.store.on_command(&mut self.q, &mut self.world_rng, &mut self.faults_rng, store_fail, &self.options, op, command);
            }
            Effect::Scan { op, provider } => {
                self.scan_ops.insert(op);
                let faults = self.faults.clone();
                let wall_ms = self.now_host().wall.0;
                let mut cx = backend::Ctx { q: &mut self.q, world: &mut self.world_rng, faults_rng: &mut self.faults_rng, faults: &faults, options: &self.options, wall_ms };
                self.backend.on_scan(&mut cx, op, &provider);
            }
            Effect::Git { op, command } => {
                // Run on the simulated machine's repositories (or a failure
                // before anything ran); answered after the git latency.
                self.trees.before_command(&self.host.view(), &self.git, &command).map_err(|v| self.violation(v))?;
                let result = if self.faults_rng.chance(self.faults.git_fail) {
                    self.git.removed.clear();
                    match &command {
                        // Half the time git fails on the folder's
                        // repository rather than before anything ran: the
                        // shell still answers what the folders are
                        // (docs/DECISIONS.md, 28).
                        ahpd_core::git::GitCmd::Inspect { folder, also } if self.faults_rng.chance(0.5) => {
                            Ok(self.git.inspect_unreadable(folder, also, "simulated git failure: the repository could not be read"))
                        }
                        _ => Err("simulated git failure: the command did not run".to_owned()),
                    }
                } else {
                    self.git.run(&command)
                };
                self.trees.after_command(&self.host.view(), &self.git, op, &command, &result).map_err(|v| self.violation(v))?;
                let outcome = match result {
                    Ok(r) => ahpd_core::Outcome::Git(r),
                    Err(message) => ahpd_core::Outcome::Failed { message },
                };
                let delay = self.world_rng.exp_ms(self.options.git.git_ms);
                self.q.to_host(None, delay, Input::Done { op, outcome }, format!("done op{} git", op.0));
            }
            Effect::Log(l) => {
                *self.log_events.entry(l.event).or_default() += 1;
                if l.event == "limit.rate" {
                    self.rate_line(&l.detail)?;
                }
            }
            Effect::Fs { op, command } => {
                // Run on the simulated machine at once (the shell's
                // executor), answered after a short delay; then the
                // changes its watches saw, one batch per watch.
                let result = self.fs.run(&command);
                if self.world_rng.chance(0.3) {
                    crate::files::another_program(&mut self.fs, &mut self.world_rng);
                }
                if crate::files::outside(&self.fs) != self.fs_outside {
                    return Err(self.violation(ahpd_core::invariants::Violation {
                        rule: "files_outside_unchanged",
                        detail: format!("{command:?} changed what is outside every session folder"),
                    }));
                }
                if !matches!(command, ahpd_core::files::fs::FsCmd::Unwatch { .. }) {
                    let delay = self.world_rng.exp_ms(2);
                    self.q.to_host(None, delay, Input::Done { op, outcome: Outcome::Fs(result) }, format!("done op{} fs", op.0));
                }
                for (watch, changes) in self.fs.take_batches() {
                    let delay = self.world_rng.exp_ms(5);
                    self.q.to_host(None, delay, Input::FsChanged { watch, changes }, format!("fs changed watch{watch}"));
                }
            }
            Effect::HostToolAnswer { .. } => {}
            // Dropped here, at once: what the daemon frees off its thread.
            Effect::Release(_) => {}
            Effect::Registry { op, command } => {
                let wall_ms = self.now_host().wall.0;
                self.registry.on_command(&mut self.q, wall_ms, self.faults.registry_fail, op, command);
            }
        }
        Ok(())
    }

    /// Issue 25, "refusals logged as one summary line per connection per
    /// interval (counts), never one line per frame": a `limit.rate` line
    /// names its connection and a count, and comes at most once per
    /// `RATE_LOG_INTERVAL_MS` for that connection; the line a connection's
    /// going adds (its last count) is the one exception.
    fn rate_line(&mut self, detail: &str) -> Result<(), Failure> {
        let words: Vec<&str> = detail.split_whitespace().collect();
        let conn = words.get(1).and_then(|w| w.parse::<u64>().ok()).map(ConnId);
        let count = words.iter().position(|w| *w == "frames/s:").and_then(|i| words.get(i + 1)).and_then(|w| w.parse::<u64>().ok());
        let (Some(conn), Some(_)) = (conn, count) else {
            return Err(self.violation(ahpd_core::invariants::Violation {
                rule: "rate_refusals_summarised",
                detail: format!("a limit.rate line with no connection or count: {detail}"),
            }));
        };
        let now = self.now_host().mono;
        if detail.ends_with("it went") {
            self.rate_lines.remove(&conn);
            return Ok(());
        }
        if let Some(last) = self.rate_lines.insert(conn, now) {
            if now.0.saturating_sub(last.0) < ahpd_core::host::RATE_LOG_INTERVAL_MS {
                return Err(self.violation(ahpd_core::invariants::Violation {
                    rule: "rate_refusals_summarised",
                    detail: format!("two limit.rate lines for connection {} {} ms apart: {detail}", conn.0, now.0.saturating_sub(last.0)),
                }));
            }
        }
        Ok(())
    }

    /// An agent is started (in a trusted folder, which its turns write
    /// in) or handed a turn (which may write in its folder).
    fn on_agent_command(&mut self, chat: &Uri, command: &ahpd_core::BackendCmd) -> Result<(), Failure> {
        match command {
            ahpd_core::BackendCmd::Start { working_directory, peer_directories, .. } => {
                let folders: Vec<String> = working_directory.iter().chain(peer_directories.iter()).cloned().collect();
                checkers::trees::check_start_trusted(&self.host.view(), &folders).map_err(|v| self.violation(v))?;
                match working_directory.as_deref().and_then(ahpd_core::git::path_of_uri) {
                    Some(dir) => self.chat_dirs.insert(chat.clone(), dir),
                    None => self.chat_dirs.remove(chat),
                };
            }
            ahpd_core::BackendCmd::Send { message, .. } => {
                // A wake's prompt, or a message a tool sent, becomes one
                // turn, never two (issue 24: "a due wake fires exactly
                // once"; the sim's prompts are unique per call).
                if message.text.starts_with("sim wake ") || message.text.starts_with("sim message ") || message.text.starts_with("sim child ") {
                    if !self.tool_turns.insert(message.text.clone()) {
                        return Err(self.violation(ahpd_core::invariants::Violation {
                            rule: "tool_turn_started_once",
                            detail: format!("'{}' started a second turn (on {chat})", message.text),
                        }));
                    }
                }
                // "the parent gets childFinished" once per turn end of the
                // child (issue 24; docs/DECISIONS.md, 24), across crashes.
                let finished = message.meta.as_ref().and_then(|m| m.get("ahpd.hostTool")).and_then(|t| t.get("childFinished"));
                if let Some(f) = finished {
                    let key = (f["session"].as_str().unwrap_or_default().to_owned(), f["finish"].as_u64().unwrap_or_default());
                    if !self.child_finishes.insert(key.clone()) {
                        return Err(self.violation(ahpd_core::invariants::Violation {
                            rule: "child_finished_once",
                            detail: format!("{}'s turn end {} reached its parent twice (on {chat})", key.0, key.1),
                        }));
                    }
                }
                if let Some(dir) = self.chat_dirs.get(chat) {
                    if self.world_rng.chance(0.7) {
                        self.git.agent_turn(dir, &mut self.world_rng);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The host process dies: its inputs in flight, its agents and its
    /// sockets go; the store keeps what reached the disk; the host restarts
    /// through `Host::new` with the durable records.
    fn crash(&mut self) -> Result<(), Failure> {
        self.crash_unheard(None)
    }

    /// [`World::crash`] just after the write `landed` reached the disk and
    /// before the host heard so: the host never acknowledged it, so the
    /// restart checks count it as a write in flight, which it was.
    fn crash_unheard(&mut self, landed: Option<(String, Option<ahpd_core::SessionRecord>)>) -> Result<(), Failure> {
        self.crashes += 1;
        // The calls in flight go with the process (the agents' processes
        // hear their connection close).
        self.tool_calls_open.clear();
        // A new process: its connections' rate lines start afresh.
        self.rate_lines.clear();
        let pre = {
            let view = self.host.view();
            let mut unacked = self.store.unacked_by_key();
            if let Some((key, record)) = landed {
                unacked.entry(key).or_default().insert(0, record);
            }
            PreCrash {
                bits: view.sessions.values().map(|s| (s.record().key().into_owned(), (s.record().is_read, s.record().is_archived))).collect(),
                unacked,
            }
        };
        add_stats(&mut self.stats_before, self.host.view().stats);
        self.store.on_host_crash(&mut self.faults_rng);
        self.backend.on_host_crash();
        self.q.incarnation += 1;
        self.q.retain(|e| !matches!(e, Event::Deliver { .. } | Event::CloseConn { .. } | Event::AgentStep { .. } | Event::StoreAck { .. }));
        self.op_subject.clear();
        self.scan_ops.clear();
        self.trees.on_host_crash();
        for client in 0..self.clients.len() {
            if self.clients[client].conn.is_some() {
                self.clients[client].on_closed();
                let d = self.workload.range(10, 1_000);
                self.q.push(d, Event::Reconnect { client });
            }
        }
        self.host_epoch = self.q.now;
        let seed = self.core_rng.next_u64();
        // A new process: another pid (or the same pid, another start time).
        let (pid, start) = self.registry.on_host_crash();
        self.config.awareness.pid = pid;
        self.config.awareness.pid_start = start;
        self.aware.on_host_start();
        self.narrow_trust();
        self.host = Host::new(self.config.clone(), seed, self.store.records(), self.now_host());
        // The process's watches went with it.
        self.fs.watches.clear();
        self.host.restore_automations(self.store.automations.values().cloned());
        // A new process: no mirror has been compared with its state yet.
        self.stale.iter_mut().for_each(checkers::Stale::all);
        self.trace.note(self.steps, self.q.now, &format!("host crash #{}: restart with {} records", self.crashes, self.store.durable.len()));
        self.history.on_host_start(&self.host.view()).map_err(|v| self.violation(v))?;
        self.grants.on_host_start(&self.host.view());
        self.residency.on_host_start(&self.host.view());
        checkers::check_restart(&pre, &self.store, &self.host.view()).map_err(|v| self.violation(v))?;
        // The sessions read back are checked whole once; from the first
        // input on, only those an input touches.
        ahpd_core::invariants::check_sessions(&self.host.view()).map_err(|v| self.violation(v))?;
        self.store.settle_after_crash();
        Ok(())
    }
}

impl World {
    /// Before a restart, maybe: the operator narrowed the trusted folders
    /// (`Faults::trust_narrows`). Clients predict refusals from the same
    /// list, so both change together.
    fn narrow_trust(&mut self) {
        if !self.faults_rng.chance(self.faults.trust_narrows) {
            return;
        }
        let list = match self.options.git.trusted_folders.take() {
            Some(mut list) if !list.is_empty() => {
                let i = self.faults_rng.below(list.len() as u64) as usize;
                list.remove(i);
                list
            }
            _ => {
                let lists = &crate::options::TRUST_LISTS;
                lists[self.faults_rng.below(lists.len() as u64 - 1) as usize].iter().map(|f| (*f).to_owned()).collect()
            }
        };
        self.trace.note(self.steps, self.q.now, &format!("trusted folders narrowed to {list:?}"));
        self.config.trust = ahpd_core::trust::Trust::of(&list);
        self.options.git.trusted_folders = Some(list);
    }
}

/// Which clients' mirrors a step may have moved (see `World::mirror_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MirrorScope {
    /// Neither the host nor any client's mirrors: nothing to compare again.
    Unchanged,
    /// Only this client took a frame.
    One(usize),
    /// The host took an input (or a connection came or went): every client.
    All,
}

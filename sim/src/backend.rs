//! The simulated agent backend: one agent per chat, a transcript per
//! conversation that outlives agents (and host crashes), latencies drawn
//! from the world stream and faults from the fault stream.
//!
//! A turn is a script of steps (a markdown part, deltas, perhaps a tool call
//! that waits for the client's confirmation, then `chat/turnComplete` or
//! `chat/error`), played one step per world event. Faults: start and resume
//! failures, slow resumes, an agent that exits mid-turn, background work
//! reported through `Busy`, late and duplicated `Done` replies.

use std::collections::{BTreeMap, VecDeque};

use ahp_types::actions::StateAction;
use ahp_types::state::{MarkdownResponsePart, Message, ResponsePart, Turn, TurnState};
use ahp_types::Uri;
use ahpd_core::{BackendCmd, BackendEvent, Input, OpId, Outcome};
use serde_json::json;

use crate::options::{Faults, Options};
use crate::queue::{Event, Lane, Queue};
use crate::rng::SimRng;

/// One step of an agent's script.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// Open a markdown part.
    Part,
    /// Append text to the open markdown part.
    Delta(String),
    /// A tool call starts streaming.
    ToolStart(String),
    /// The tool call is ready and waits for the client's confirmation.
    ToolReady(String),
    /// The tool call is ready, declares the paths it will write
    /// (`_meta["ahpd.writes"]`, workspace awareness) and waits for the
    /// host's word.
    ToolReadyWrites(String, Vec<String>),
    /// The agent reports the paths it wrote (its claims).
    Wrote(Vec<String>),
    /// The confirmed tool call finished.
    ToolDone(String),
    /// The agent asks a question (`chat/inputRequested`, this request id)
    /// and waits for its answer (`BackendCmd::Answer`).
    Ask(String),
    /// The turn completes.
    Complete,
    /// The turn ends in an error; `true`: one the client may resume
    /// (`chat/turnResume`).
    Error(bool),
    /// The agent process exits.
    Crash,
    /// Background work starts or stops.
    Busy(bool),
    /// Nothing for a while.
    Pause(u64),
}

impl Step {
    fn is_turn(&self) -> bool {
        !matches!(self, Step::Busy(_) | Step::Pause(_))
    }
}

#[derive(Debug, Clone, PartialEq)]
struct TurnRun {
    turn_id: String,
    message: Message,
    parts: Vec<ResponsePart>,
    open_part: Option<String>,
    waiting: Option<String>,
    /// The paths the waiting tool call writes once confirmed.
    writes: Vec<String>,
    /// A steering message handed to the turn and not taken yet
    /// (`BackendCmd::Steer`): taken at a later step, or never when the
    /// turn ends first.
    steer: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Agent {
    running: bool,
    gen: u64,
    conversation: String,
    turn: Option<TurnRun>,
    script: VecDeque<Step>,
    step_scheduled: bool,
    busy: bool,
}

/// Counters of what the backend did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Turns completed.
    pub turns_completed: u64,
    /// Turns ended in error.
    pub turns_failed: u64,
    /// Agents that exited on their own.
    pub crashes: u64,
    /// Starts refused.
    pub start_failures: u64,
    /// Resumes answered.
    pub resumes: u64,
    /// `Done` replies sent twice.
    pub duplicates: u64,
    /// Turns resumed (`BackendCmd::Resume` taken).
    pub resumed_turns: u64,
    /// Steering messages taken into a running turn.
    pub steered: u64,
    /// Resumes that found a transcript damaged (newly or still).
    pub transcripts_damaged: u64,
    /// Damaged transcripts restored.
    pub transcripts_restored: u64,
}

/// What the backend writes down about one conversation besides its turns
/// (what a scan of its transcripts reads back).
#[derive(Debug, Clone, PartialEq, Default)]
struct Meta {
    provider: String,
    session: Uri,
    chat: Uri,
    title: String,
    working_directory: Option<Uri>,
    created_ms: i64,
    modified_ms: i64,
    prompted: bool,
}

/// The simulated backend.
#[derive(Debug, Clone, Default)]
pub struct Backend {
    agents: BTreeMap<Uri, Agent>,
    conversations: BTreeMap<String, Vec<Turn>>,
    /// Conversations whose transcript a resume found damaged, until
    /// restored (`Faults::transcript_damaged`).
    damaged: std::collections::BTreeSet<String>,
    meta: BTreeMap<String, Meta>,
    next_assigned: u64,
    parts: u64,
    /// Counters.
    pub stats: BackendStats,
    /// The draws of the agents' host tool calls (`Stream::Tools`), made
    /// on the first turn.
    tools_rng: Option<crate::rng::SimRng>,
    /// The last host tool call id given (never reused across restarts:
    /// the backend outlives the host).
    next_call: u64,
}

/// Where the simulated backend says its transcripts are: a server path no
/// client may read (issue 25: the words of a damaged transcript name none;
/// `World::route` checks every frame a client is sent).
pub const SERVER_PATH: &str = "/var/lib/ahpd-sim/echo/";

/// What the backend needs from the world to act.
pub struct Ctx<'a> {
    /// The event queue.
    pub q: &'a mut Queue,
    /// Latencies and behaviour.
    pub world: &'a mut SimRng,
    /// Fault draws.
    pub faults_rng: &'a mut SimRng,
    /// Current fault probabilities.
    pub faults: &'a Faults,
    /// The scenario.
    pub options: &'a Options,
    /// The wall clock now, ms since the epoch (stamped into transcripts).
    pub wall_ms: i64,
}

fn action(value: serde_json::Value) -> StateAction {
    let action: StateAction = serde_json::from_value(value.clone()).unwrap_or(StateAction::Unknown(value.clone()));
    debug_assert!(!matches!(action, StateAction::Unknown(_)), "sim built an unreadable action: {value}");
    action
}

impl Backend {
    /// Maybe (one turn in five) the turn's agent calls a host tool (issue
    /// 24): a wake soon or in a while, a message to a session this backend
    /// has run (or to one that does not exist, or to its own), a cancel of
    /// a wake id that may not exist, a child session, a child's status, or
    /// its peers. Prompts and texts are
    /// unique, so a checker can tell a turn's second start from another
    /// turn (`World::on_agent_command`).
    fn maybe_call_tool(&mut self, cx: &mut Ctx<'_>, chat: &Uri) {
        use ahpd_core::tools::HostToolRequest;
        let rng = self.tools_rng.get_or_insert_with(|| crate::rng::SimRng::new(cx.options.seed, crate::rng::Stream::Tools));
        if !rng.chance(0.2) {
            return;
        }
        self.next_call += 1;
        let call = ahpd_core::HostCallId(self.next_call);
        let mut sessions: Vec<&Uri> = self.meta.values().map(|m| &m.session).collect();
        sessions.dedup();
        let tool = match rng.below(8) {
            0 => HostToolRequest::ScheduleWakeup { after_seconds: Some(rng.range(0, 5)), at: None, prompt: format!("sim wake {}", call.0) },
            1 => HostToolRequest::ScheduleWakeup { after_seconds: Some(rng.range(5, 600)), at: None, prompt: format!("sim wake {}", call.0) },
            2 | 3 => {
                let target = rng.pick(&sessions).map(|u| (*u).clone()).filter(|_| rng.chance(0.9)).unwrap_or_else(|| "ahp-session:/nobody".to_owned());
                HostToolRequest::SendMessage { session: target, text: format!("sim message {}", call.0) }
            }
            4 => HostToolRequest::CancelWakeup { id: format!("wake-{}", rng.range(1, 4)) },
            // A child on echo (now and then on an agent no host has), or
            // the status of a session this backend ran (a child of the
            // caller or not).
            5 => {
                let provider = if rng.chance(0.9) { "echo" } else { "nope" };
                HostToolRequest::StartChildSession { provider: provider.to_owned(), prompt: format!("sim child {}", call.0), working_directory: None }
            }
            6 => {
                let child = rng.pick(&sessions).map(|u| (*u).clone()).unwrap_or_else(|| "ahp-session:/nobody".to_owned());
                HostToolRequest::ChildStatus { child }
            }
            _ => HostToolRequest::ListPeers,
        };
        let delay = rng.range(1, 500);
        cx.q.to_host(Some(Lane::FromChat(chat.clone())), delay, Input::HostTool { call, chat: chat.clone(), tool }, format!("agent tool call{} {chat}", call.0));
    }

    /// Whether resuming `conversation` finds its transcript damaged: one
    /// already damaged stays so until restored (a chance per resume, and
    /// at once once faults heal); another turns damaged by chance.
    fn resume_finds_damage(&mut self, cx: &mut Ctx<'_>, conversation: &str) -> bool {
        if self.damaged.contains(conversation) {
            let restored = cx.faults.transcript_damaged == 0.0 || cx.faults_rng.chance(0.3);
            if restored {
                self.damaged.remove(conversation);
                self.stats.transcripts_restored += 1;
            }
            return !restored;
        }
        if cx.faults.transcript_damaged > 0.0 && cx.faults_rng.chance(cx.faults.transcript_damaged) {
            self.damaged.insert(conversation.to_owned());
            self.stats.transcripts_damaged += 1;
            return true;
        }
        false
    }

    /// The conversations of `provider` whose transcript is damaged, as a
    /// pass over its transcripts reports them (it cannot read them back).
    fn damaged_of(&self, provider: &str) -> Vec<String> {
        self.damaged.iter().filter(|c| self.meta.get(*c).is_some_and(|m| m.provider == provider)).cloned().collect()
    }

    /// Executes one `Effect::Backend`.
    pub fn on_command(&mut self, cx: &mut Ctx<'_>, op: OpId, provider: &str, chat: &Uri, command: BackendCmd) {
        let latency = cx.world.exp_ms(cx.options.backend_ms);
        match command {
            BackendCmd::Start { session, conversation_id, resume, working_directory, .. } => {
                let known_provider = provider == "echo" || (provider == "oneshot" && cx.options.non_resumable_agent);
                let fail = !known_provider
                    || if resume { cx.faults_rng.chance(cx.faults.resume_fail) } else { cx.faults_rng.chance(cx.faults.start_fail) };
                let mut delay = latency;
                if resume && cx.faults_rng.chance(cx.faults.slow_resume) {
                    delay += cx.faults_rng.range(2_000, 15_000);
                }
                if fail {
                    self.stats.start_failures += 1;
                    let agent = self.agents.entry(chat.clone()).or_default();
                    Self::stop(agent);
                    let message = if resume { "the conversation could not be resumed" } else { "the agent would not start" };
                    self.done(cx, chat, op, Outcome::Failed { message: message.to_owned() }, delay);
                    return;
                }
                if resume && provider == "echo" && self.resume_finds_damage(cx, &conversation_id) {
                    let agent = self.agents.entry(chat.clone()).or_default();
                    Self::stop(agent);
                    let detail = format!("echo: transcript {SERVER_PATH}{conversation_id}.json is unreadable");
                    self.done(cx, chat, op, Outcome::TranscriptDamaged { detail }, delay);
                    return;
                }
                let conversation = if !resume && cx.world.chance(cx.options.backend_assigns_id) {
                    self.next_assigned += 1;
                    format!("srv-{}", self.next_assigned)
                } else {
                    conversation_id
                };
                let history = if resume && provider == "echo" {
                    self.stats.resumes += 1;
                    self.conversations.get(&conversation).cloned().unwrap_or_default()
                } else {
                    self.conversations.insert(conversation.clone(), Vec::new());
                    self.meta.insert(conversation.clone(), Meta {
                        provider: provider.to_owned(),
                        session,
                        chat: chat.clone(),
                        working_directory,
                        created_ms: cx.wall_ms,
                        modified_ms: cx.wall_ms,
                        ..Meta::default()
                    });
                    Vec::new()
                };
                let agent = self.agents.entry(chat.clone()).or_default();
                Self::stop(agent);
                agent.running = true;
                agent.conversation = conversation.clone();
                self.done(cx, chat, op, Outcome::Started { conversation_id: conversation, history }, delay);
            }
            BackendCmd::Send { turn_id, message, .. } => {
                let running = self.agents.get(chat).is_some_and(|a| a.running);
                if !running || cx.faults_rng.chance(cx.faults.send_fail) {
                    let message = if running { "the agent refused the message" } else { "no agent is running for this chat" };
                    self.done(cx, chat, op, Outcome::Failed { message: message.to_owned() }, latency);
                    return;
                }
                let script = self.script(cx);
                let conversation = self.agents.get(chat).map(|a| a.conversation.clone()).unwrap_or_default();
                if let Some(meta) = self.meta.get_mut(&conversation) {
                    if !meta.prompted {
                        meta.prompted = true;
                        meta.title = message.text.lines().next().unwrap_or("").to_owned();
                    }
                    meta.modified_ms = meta.modified_ms.max(cx.wall_ms);
                }
                let agent = self.agents.entry(chat.clone()).or_default();
                if let Some(old) = agent.turn.take() {
                    let conversation = agent.conversation.clone();
                    self.record(&conversation, old, TurnState::Cancelled);
                }
                let agent = self.agents.entry(chat.clone()).or_default();
                agent.script.retain(|s| !s.is_turn());
                agent.script.extend(script);
                agent.turn = Some(TurnRun { turn_id, message: Message::clone(&message), parts: Vec::new(), open_part: None, waiting: None, writes: Vec::new(), steer: None });
                self.done(cx, chat, op, Outcome::Ok, latency);
                self.schedule_step(cx, chat);
                self.maybe_call_tool(cx, chat);
            }
            BackendCmd::Steer { turn_id, id, message: _ } => {
                // Held for the turn's next safe point; the newest replaces
                // one not taken yet.
                let turn = self.agents.get_mut(chat).filter(|a| a.running).and_then(|a| a.turn.as_mut()).filter(|t| t.turn_id == turn_id);
                let outcome = match turn {
                    Some(turn) => {
                        turn.steer = Some(id);
                        Outcome::Ok
                    }
                    None => Outcome::Failed { message: "no such turn is running".to_owned() },
                };
                self.done(cx, chat, op, outcome, latency);
            }
            BackendCmd::Resume { turn_id } => {
                // The conversation's last turn, ended in a resumable error,
                // runs again (its history keeps it until it ends again).
                let agent = self.agents.get(chat);
                let running = agent.is_some_and(|a| a.running && a.turn.is_none());
                let conversation = agent.map(|a| a.conversation.clone()).unwrap_or_default();
                let resumable = self.conversations.get(&conversation).and_then(|turns| turns.last()).is_some_and(|t| {
                    t.id == turn_id && matches!(t.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true))
                });
                if !running || !resumable || cx.faults_rng.chance(cx.faults.send_fail) {
                    let message = if !running { "no agent is free for this chat" } else { "the turn could not be resumed" };
                    self.done(cx, chat, op, Outcome::Failed { message: message.to_owned() }, latency);
                    return;
                }
                let Some(turn) = self.conversations.get_mut(&conversation).and_then(Vec::pop) else { return };
                let script = self.script(cx);
                let agent = self.agents.entry(chat.clone()).or_default();
                agent.script.retain(|s| !s.is_turn());
                agent.script.extend(script);
                agent.turn = Some(TurnRun { turn_id, message: turn.message, parts: turn.response_parts, open_part: None, waiting: None, writes: Vec::new(), steer: None });
                self.stats.resumed_turns += 1;
                self.done(cx, chat, op, Outcome::Ok, latency);
                self.schedule_step(cx, chat);
            }
            BackendCmd::Cancel { turn_id } => {
                if let Some(agent) = self.agents.get_mut(chat) {
                    if agent.turn.as_ref().is_some_and(|t| t.turn_id == turn_id) {
                        if cx.faults_rng.chance(cx.faults.stale_event) {
                            // Output already on its way when the cancel
                            // landed: the host must ignore it.
                            let part_id = agent.turn.as_ref().and_then(|t| t.open_part.clone()).unwrap_or_else(|| "md-0".to_owned());
                            let event = BackendEvent::Action(action(json!({
                                "type": "chat/delta", "turnId": turn_id, "partId": part_id, "content": "late words. "
                            })));
                            let delay = cx.world.exp_ms(cx.options.backend_ms);
                            cx.q.to_host(Some(Lane::FromChat(chat.clone())), delay, Input::Backend { chat: chat.clone(), event }, "agent late chat/delta".to_owned());
                        }
                        let turn = agent.turn.take();
                        agent.script.retain(|s| !s.is_turn());
                        let conversation = agent.conversation.clone();
                        if let Some(turn) = turn {
                            self.record(&conversation, turn, TurnState::Cancelled);
                        }
                    }
                }
                self.done(cx, chat, op, Outcome::Ok, latency);
            }
            BackendCmd::ConfirmTool { turn_id, tool_call_id, approved } => {
                let mut resume = false;
                if let Some(agent) = self.agents.get_mut(chat) {
                    if let Some(turn) = agent.turn.as_mut().filter(|t| t.turn_id == turn_id) {
                        if turn.waiting.as_deref() == Some(tool_call_id.as_str()) {
                            turn.waiting = None;
                            if approved {
                                agent.script.push_front(Step::ToolDone(tool_call_id));
                                let writes = std::mem::take(&mut turn.writes);
                                if !writes.is_empty() {
                                    agent.script.push_front(Step::Wrote(writes));
                                }
                            }
                            resume = true;
                        }
                    }
                }
                self.done(cx, chat, op, Outcome::Ok, latency);
                if resume {
                    self.schedule_step(cx, chat);
                }
            }
            BackendCmd::Answer { turn_id, request, response: _ } => {
                // The question answered: the turn goes on.
                let mut resume = false;
                if let Some(turn) = self.agents.get_mut(chat).and_then(|a| a.turn.as_mut()).filter(|t| t.turn_id == turn_id) {
                    if turn.waiting.as_deref() == Some(request.id.as_str()) {
                        turn.waiting = None;
                        resume = true;
                    }
                }
                self.done(cx, chat, op, Outcome::Ok, latency);
                if resume {
                    self.schedule_step(cx, chat);
                }
            }
            BackendCmd::Close => {
                if let Some(agent) = self.agents.get_mut(chat) {
                    let turn = agent.turn.take();
                    let conversation = agent.conversation.clone();
                    Self::stop(agent);
                    if let Some(turn) = turn {
                        self.record(&conversation, turn, TurnState::Cancelled);
                    }
                }
                self.done(cx, chat, op, Outcome::Ok, latency);
            }
            BackendCmd::Forget { conversation_id, turn_ids } => {
                // A rewind: the transcript forgets the turns (the write
                // fails as a send may, and the host must ask again).
                if cx.faults_rng.chance(cx.faults.send_fail) {
                    self.done(cx, chat, op, Outcome::Failed { message: "the transcript could not be rewritten".to_owned() }, latency);
                    return;
                }
                if let Some(turns) = self.conversations.get_mut(&conversation_id) {
                    turns.retain(|t| !turn_ids.contains(&t.id));
                }
                self.done(cx, chat, op, Outcome::Ok, latency);
            }
            BackendCmd::Delete { conversation_id } => {
                if let Some(agent) = self.agents.get_mut(chat) {
                    Self::stop(agent);
                    agent.turn = None;
                }
                // Sometimes the backend's copy outlives the delete.
                if !(cx.faults.delete_keeps_copy > 0.0 && cx.faults_rng.chance(cx.faults.delete_keeps_copy)) {
                    self.conversations.remove(&conversation_id);
                    self.meta.remove(&conversation_id);
                }
                self.done(cx, chat, op, Outcome::Ok, latency);
            }
        }
    }

    /// Executes one `Effect::Scan`: a row for every conversation of
    /// `provider` that holds a prompt (a transcript is written with the
    /// first message), naming the session and chat it was started for; the
    /// damaged ones reported as such instead.
    pub fn on_scan(&mut self, cx: &mut Ctx<'_>, op: OpId, provider: &str) {
        let rows = self
            .meta
            .iter()
            // A damaged transcript gives no row: it is reported as damaged.
            .filter(|(id, m)| m.provider == provider && m.prompted && !self.damaged.contains(*id))
            .map(|(id, m)| ahpd_core::input::ScannedRow {
                conversation_id: id.clone(),
                session: Some(m.session.clone()),
                chat: Some(m.chat.clone()),
                title: m.title.clone(),
                working_directory: m.working_directory.clone(),
                created_at: ahpd_core::WallTime(m.created_ms),
                modified_at: ahpd_core::WallTime(m.modified_ms),
            })
            .collect();
        let delay = cx.world.exp_ms(cx.options.backend_ms);
        cx.q.to_host(None, delay, Input::Done { op, outcome: Outcome::Scanned { rows, damaged: self.damaged_of(provider) } }, format!("done op{} scanned {provider}", op.0));
    }

    /// Stops an agent: nothing it scheduled will run.
    fn stop(agent: &mut Agent) {
        agent.running = false;
        agent.gen += 1;
        agent.script.clear();
        agent.step_scheduled = false;
        agent.busy = false;
    }

    fn record(&mut self, conversation: &str, run: TurnRun, state: TurnState) {
        let turn = Turn {
            id: run.turn_id,
            started_at: None,
            duration: None,
            message: run.message,
            response_parts: run
                .parts
                .into_iter()
                .filter(|p| matches!(p, ResponsePart::Markdown(_) | ResponsePart::Error(_)))
                .collect(),
            usage: None,
            state,
        };
        if let Some(turns) = self.conversations.get_mut(conversation) {
            turns.push(turn);
        }
    }

    /// A turn's script, from the world stream (faults from the fault stream).
    fn script(&mut self, cx: &mut Ctx<'_>) -> Vec<Step> {
        let mut steps = vec![Step::Part];
        for i in 0..cx.world.below(3) {
            steps.push(Step::Delta(format!("chunk {i}. ")));
        }
        if cx.world.chance(0.35) {
            self.parts += 1;
            let id = format!("tool-{}", self.parts);
            steps.push(Step::ToolStart(id.clone()));
            let a = &cx.options.awareness;
            if a.enabled && a.write_tools > 0.0 && cx.world.chance(a.write_tools) {
                let paths = crate::registry::WRITE_PATHS;
                let mut writes: Vec<String> = paths.iter().filter(|_| cx.world.chance(0.4)).map(|p| (*p).to_owned()).collect();
                if writes.is_empty() {
                    writes.push(paths[cx.world.below(paths.len() as u64) as usize].to_owned());
                }
                steps.push(Step::ToolReadyWrites(id, writes));
            } else {
                steps.push(Step::ToolReady(id));
            }
        }
        if cx.world.chance(0.2) {
            self.parts += 1;
            steps.push(Step::Ask(format!("ask-{}", self.parts)));
        }
        for i in 0..cx.world.below(2) {
            steps.push(Step::Delta(format!("more {i}. ")));
        }
        steps.push(if cx.world.chance(0.85) { Step::Complete } else { Step::Error(cx.world.chance(0.5)) });
        for i in 0..steps.len() {
            if cx.faults_rng.chance(cx.faults.crash_mid_turn) {
                steps.truncate(i);
                steps.push(Step::Crash);
                break;
            }
        }
        if !matches!(steps.last(), Some(Step::Crash)) && cx.faults_rng.chance(cx.faults.busy_flap) {
            steps.push(Step::Busy(true));
            steps.push(Step::Pause(cx.world.exp_ms(500)));
            steps.push(Step::Busy(false));
        }
        steps
    }

    fn schedule_step(&mut self, cx: &mut Ctx<'_>, chat: &Uri) {
        let Some(agent) = self.agents.get_mut(chat) else { return };
        if agent.step_scheduled || !agent.running || agent.script.is_empty() {
            return;
        }
        if agent.turn.as_ref().is_some_and(|t| t.waiting.is_some()) && agent.script.front().is_some_and(Step::is_turn) {
            return;
        }
        agent.step_scheduled = true;
        let gen = agent.gen;
        let delay = match agent.script.front() {
            Some(Step::Pause(ms)) => *ms,
            _ => cx.world.exp_ms(cx.options.backend_ms),
        };
        cx.q.push_lane(Lane::FromChat(chat.clone()), delay, Event::AgentStep { chat: chat.clone(), gen });
    }

    fn done(&mut self, cx: &mut Ctx<'_>, chat: &Uri, op: OpId, outcome: Outcome, delay: u64) {
        let label = format!("done op{} {}", op.0, outcome_name(&outcome));
        if cx.faults_rng.chance(cx.faults.late_done) {
            let late = delay + cx.faults_rng.range(500, 5_000);
            cx.q.to_host(None, late, Input::Done { op, outcome: outcome.clone() }, format!("{label} (late)"));
        } else {
            cx.q.to_host(Some(Lane::FromChat(chat.clone())), delay, Input::Done { op, outcome: outcome.clone() }, label.clone());
        }
        if cx.faults_rng.chance(cx.faults.dup_done) {
            self.stats.duplicates += 1;
            let again = delay + cx.faults_rng.range(1, 3_000);
            cx.q.to_host(None, again, Input::Done { op, outcome }, format!("{label} (duplicate)"));
        }
    }

    /// The agent of `chat` takes one scripted step: returns the input it
    /// sends the host, if any, and schedules the next step.
    pub fn on_step(&mut self, cx: &mut Ctx<'_>, chat: &Uri, gen: u64) -> Option<(Input, String)> {
        let agent = self.agents.get_mut(chat)?;
        if agent.gen != gen || !agent.running {
            return None;
        }
        agent.step_scheduled = false;
        // A safe point: a steering message handed over may be taken here
        // (not while a tool call or a question waits), before the next step.
        let steer = agent.turn.as_ref().filter(|t| t.waiting.is_none() && t.steer.is_some()).map(|t| t.turn_id.clone());
        if let Some(turn_id) = steer {
            if cx.world.chance(0.5) {
                let id = agent.turn.as_mut().and_then(|t| t.steer.take()).unwrap_or_default();
                self.stats.steered += 1;
                self.schedule_step(cx, chat);
                return Some((Input::Backend { chat: chat.clone(), event: BackendEvent::SteeringTaken { turn_id, id } }, "agent took steering".to_owned()));
            }
        }
        let agent = self.agents.get_mut(chat)?;
        let step = agent.script.pop_front()?;
        let turn_id = agent.turn.as_ref().map(|t| t.turn_id.clone());
        let event = match step {
            Step::Pause(_) => None,
            Step::Busy(b) => {
                agent.busy = b;
                Some(BackendEvent::Busy(b))
            }
            Step::Crash => {
                let turn = agent.turn.take();
                let conversation = agent.conversation.clone();
                Self::stop(agent);
                self.stats.crashes += 1;
                if let Some(turn) = turn {
                    self.record(&conversation, turn, TurnState::Error);
                }
                return Some((
                    Input::Backend { chat: chat.clone(), event: BackendEvent::Exited { message: "simulated crash (exit 137)".to_owned() } },
                    "agent exited".to_owned(),
                ));
            }
            step => {
                let turn_id = turn_id?;
                let turn = agent.turn.as_mut()?;
                match step {
                    Step::Part => {
                        self.parts += 1;
                        let id = format!("md-{}", self.parts);
                        turn.parts.push(ResponsePart::Markdown(MarkdownResponsePart { id: id.clone(), content: String::new() }));
                        turn.open_part = Some(id.clone());
                        Some(BackendEvent::Action(action(json!({
                            "type": "chat/responsePart", "turnId": turn_id,
                            "part": {"kind": "markdown", "id": id, "content": ""}
                        }))))
                    }
                    Step::Delta(text) => {
                        let part_id = turn.open_part.clone().unwrap_or_default();
                        for p in &mut turn.parts {
                            if let ResponsePart::Markdown(m) = p {
                                if m.id == part_id {
                                    m.content.push_str(&text);
                                }
                            }
                        }
                        Some(BackendEvent::Action(action(json!({
                            "type": "chat/delta", "turnId": turn_id, "partId": part_id, "content": text
                        }))))
                    }
                    Step::ToolStart(id) => Some(BackendEvent::Action(action(json!({
                        "type": "chat/toolCallStart", "turnId": turn_id, "toolCallId": id,
                        "toolName": "shell", "displayName": "Shell"
                    })))),
                    Step::ToolReady(id) => {
                        turn.waiting = Some(id.clone());
                        Some(BackendEvent::Action(action(json!({
                            "type": "chat/toolCallReady", "turnId": turn_id, "toolCallId": id,
                            "invocationMessage": "run the tests"
                        }))))
                    }
                    Step::ToolReadyWrites(id, writes) => {
                        turn.waiting = Some(id.clone());
                        turn.writes = writes.clone();
                        Some(BackendEvent::Action(action(json!({
                            "type": "chat/toolCallReady", "turnId": turn_id, "toolCallId": id,
                            "invocationMessage": "edit the files", "confirmed": "not-needed",
                            "_meta": {"ahpd.writes": writes}
                        }))))
                    }
                    Step::Wrote(paths) => Some(BackendEvent::Wrote { paths }),
                    Step::Ask(id) => {
                        turn.waiting = Some(id.clone());
                        Some(BackendEvent::Action(action(json!({
                            "type": "chat/inputRequested",
                            "request": {"id": id, "message": "which one?", "questions": [{"kind": "text", "id": "answer", "message": "which one?"}]}
                        }))))
                    }
                    Step::ToolDone(id) => Some(BackendEvent::Action(action(json!({
                        "type": "chat/toolCallComplete", "turnId": turn_id, "toolCallId": id,
                        "result": {"success": true, "pastTenseMessage": "ran the tests"}
                    })))),
                    Step::Complete | Step::Error(_) => {
                        let ok = step == Step::Complete;
                        let resumable = step == Step::Error(true);
                        let mut run = agent.turn.take()?;
                        if !ok {
                            run.parts.push(error_part(resumable));
                        }
                        let conversation = agent.conversation.clone();
                        agent.script.retain(|s| !s.is_turn());
                        self.record(&conversation, run, if ok { TurnState::Complete } else { TurnState::Error });
                        if ok {
                            self.stats.turns_completed += 1;
                            Some(BackendEvent::Action(action(json!({"type": "chat/turnComplete", "turnId": turn_id, "duration": 0}))))
                        } else {
                            self.stats.turns_failed += 1;
                            Some(BackendEvent::Action(action(json!({
                                "type": "chat/error", "turnId": turn_id, "duration": 0,
                                "part": {"kind": "error", "error": {"errorType": "agentError", "message": "simulated model failure"}, "resumable": resumable}
                            }))))
                        }
                    }
                    Step::Pause(_) | Step::Busy(_) | Step::Crash => None,
                }
            }
        };
        self.schedule_step(cx, chat);
        let event = event?;
        let label = match &event {
            BackendEvent::Action(a) => format!("agent {}", action_name(a)),
            BackendEvent::Busy(b) => format!("agent busy={b}"),
            BackendEvent::Exited { .. } => "agent exited".to_owned(),
            BackendEvent::Wrote { .. } => "agent wrote".to_owned(),
            BackendEvent::SteeringTaken { .. } => "agent took steering".to_owned(),
        };
        Some((Input::Backend { chat: chat.clone(), event }, label))
    }

    /// The host process died: every agent (its child) dies with it; the
    /// conversations stay.
    pub fn on_host_crash(&mut self) {
        let chats: Vec<Uri> = self.agents.keys().cloned().collect();
        for chat in chats {
            if let Some(agent) = self.agents.get_mut(&chat) {
                let turn = agent.turn.take();
                let conversation = agent.conversation.clone();
                Self::stop(agent);
                if let Some(turn) = turn {
                    self.record(&conversation, turn, TurnState::Cancelled);
                }
            }
        }
    }

    /// Faults are off: background work ends soon for every agent.
    pub fn heal(&mut self, cx: &mut Ctx<'_>) {
        let chats: Vec<Uri> = self.agents.keys().cloned().collect();
        for chat in chats {
            if let Some(agent) = self.agents.get_mut(&chat) {
                if agent.busy && !agent.script.contains(&Step::Busy(false)) {
                    agent.script.push_back(Step::Busy(false));
                }
            }
            self.schedule_step(cx, &chat);
        }
    }

    /// Whether any agent still has unplayed steps that could run (used in
    /// `pending()` reports).
    pub fn describe(&self) -> Vec<String> {
        self.agents
            .iter()
            .filter(|(_, a)| a.running && (a.turn.is_some() || a.busy))
            .map(|(chat, a)| {
                format!(
                    "{chat}: turn={:?} waiting={:?} busy={} script={}",
                    a.turn.as_ref().map(|t| t.turn_id.clone()),
                    a.turn.as_ref().and_then(|t| t.waiting.clone()),
                    a.busy,
                    a.script.len()
                )
            })
            .collect()
    }
}

/// The error part a scripted turn ends with.
fn error_part(resumable: bool) -> ResponsePart {
    ResponsePart::Error(ahp_types::state::ErrorResponsePart {
        error: ahp_types::state::ErrorInfo { error_type: "agentError".to_owned(), message: "simulated model failure".to_owned(), stack: None, meta: None },
        resumable: Some(resumable),
    })
}

/// A short name for an outcome, for labels.
pub fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Started { .. } => "started",
        Outcome::Failed { .. } => "failed",
        Outcome::TranscriptDamaged { .. } => "transcript damaged",
        Outcome::Ok => "ok",
        Outcome::Scanned { .. } => "scanned",
        Outcome::Git(_) => "git",
        Outcome::Fs(_) => "fs",
        Outcome::RegistryScanned { .. } => "registry scanned",
    }
}

/// The wire type of an action, for labels.
pub fn action_name(action: &StateAction) -> String {
    serde_json::to_value(action)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

//! Resuming a turn (issue 23, 1): `chat/turnResume` from a client reopens
//! the chat's last turn when it ended in an error its backend marked
//! resumable (`ErrorResponsePart::resumable`), grant `chat:send` (it sends:
//! Sessions page, "Grants"), and the backend is told to go on with it
//! (`BackendCmd::Resume`).
//!
//! Taken only where the backend resumes turns (`AgentSpec::resumes_turns`:
//! the echo agent; an ACP agent is refused with the reason and nothing
//! changes), and only as the `ahp` reducer takes it: the named turn is the
//! chat's last, ended in `error`, its last response part a resumable
//! error, and no turn runs or waits to be sent in the chat. A turn a fork
//! was made with (its source's, `ChatRecord::seed`) is not the backend's
//! and is refused. The session must be live with the chat's agent started:
//! an asleep session wakes first (the action waits for the wake, as a turn
//! does), one whose chat's agent is still starting is refused with a reason
//! to try again.
//!
//! Durability (docs/DECISIONS.md, 16). A resume writes nothing the host
//! owns: the turn, its message and its sender are already in the record
//! and the backend's history (a resumable error is the backend's own, so
//! its history holds the turn and the host keeps none of it,
//! `crate::kept_turns`). The backend keeps the errored turn in its history
//! until the resumed one ends, and writes the turn's new end over it then;
//! so a crash while the resumed turn runs shows the turn as the backend
//! last wrote it (errored and resumable again, for the echo agent), and a
//! client may resume it once more. A backend that refuses the resume
//! (`Done` `Failed`) ends the turn in a not-resumable error, as a refused
//! send does.

use ahp_types::actions::{ActionOrigin, ChatTurnResumeAction, StateAction};
use ahp_types::state::{ChatState, ResponsePart, TurnState};
use ahp_types::Uri;

use crate::effect::BackendCmd;
use crate::shared::{Op, Shared};
use crate::session::{Phase, Session};

/// The refusal a client reads when the session's agent cannot resume a
/// turn.
pub const CANNOT_RESUME: &str = "this session's agent cannot resume a turn: chat/turnResume is not offered by it";

/// Whether `chat`'s last turn is `turn_id`, ended in `error` with a
/// resumable error as its last response part: the `ahp` reducer's own
/// condition for `chat/turnResume` (no turn may run, checked apart).
pub fn resumable_last(chat: &ChatState, turn_id: &str) -> bool {
    let Some(turn) = chat.turns.last() else { return false };
    turn.id == turn_id
        && turn.state == TurnState::Error
        && matches!(turn.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true))
}

impl Session {
    /// The checks a `chat/turnResume` on chat `channel` (held state
    /// `chat`) must pass (module docs). `resumes` is whether the session's
    /// agent resumes turns; `stopping` whether the host is stopping.
    pub fn check_resume(&self, channel: &Uri, chat: &ChatState, action: &ChatTurnResumeAction, resumes: bool, stopping: bool) -> Result<(), String> {
        if !resumes {
            crate::mark!("resume_refused_cannot_resume");
            return Err(CANNOT_RESUME.into());
        }
        if stopping {
            return Err(crate::shared::REFUSED_WHILE_STOPPING.into());
        }
        if chat.active_turn.is_some() || self.work.pending_sends.iter().any(|(c, _, _)| c == channel) {
            crate::mark!("resume_refused_turn_running");
            return Err("a turn is running in this chat: only an ended turn can be resumed".into());
        }
        if !chat.turns.iter().any(|t| t.id == action.turn_id) {
            crate::mark!("resume_refused_not_resumable");
            return Err("no such turn in this chat".into());
        }
        if chat.turns.last().is_some_and(|t| t.id != action.turn_id) {
            crate::mark!("resume_refused_not_resumable");
            return Err("only the chat's last turn can be resumed".into());
        }
        if !resumable_last(chat, &action.turn_id) {
            crate::mark!("resume_refused_not_resumable");
            return Err("that turn did not end in an error the agent can resume".into());
        }
        let seeded = self.record.chats.iter().any(|c| c.resource == *channel && c.seed.iter().any(|t| t.id == action.turn_id));
        if seeded {
            crate::mark!("resume_refused_not_resumable");
            return Err("that turn was copied from the chat this one was forked from: it cannot be resumed here".into());
        }
        let starting = match &self.phase {
            Phase::Live { starting } => !starting.is_empty(),
            _ => true,
        };
        if starting || self.start_owed || self.work.agents_owed.contains(channel) {
            crate::mark!("resume_refused_agent_starting");
            return Err("the chat's agent is not running yet: try again once it has started".into());
        }
        Ok(())
    }

    /// Applies a checked `chat/turnResume` on `channel`: the reducer
    /// reopens the turn (echoed with `origin`), its clock starts again, the
    /// chat's summary and the row follow, and the backend is told to go on
    /// with it, as a send (`Op::Send`: a refusal ends the turn in an
    /// error). False, with nothing done, when the reducer refused it.
    pub(crate) fn apply_resume(&mut self, sh: &mut Shared, channel: &Uri, action: ChatTurnResumeAction, origin: Option<ActionOrigin>) -> bool {
        let turn_id = action.turn_id.clone();
        if !self.emit(sh, channel, StateAction::ChatTurnResume(action), origin) {
            return false;
        }
        crate::mark!("turn_resumed");
        if let Some(resident) = self.resident.as_mut() {
            resident.turn_started_mono.insert(channel.clone(), sh.now.mono);
        }
        self.mark_activity(sh);
        self.touch(sh);
        self.after_chat_change(sh, channel);
        let op = self.backend(sh, Op::Send { session: self.record.resource.clone() }, channel.clone(), BackendCmd::Resume { turn_id: turn_id.clone() });
        self.work.sends_in_flight.insert(op, (channel.clone(), turn_id));
        true
    }
}

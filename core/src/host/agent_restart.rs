//! A chat's agent that went away in a session whose backend cannot resume
//! (Sessions page, "Sleep and wake": a session whose backend cannot resume
//! never sleeps). Such a session is not put to sleep when an agent exits,
//! since its wake would ask for a resume the backend cannot give: it stays
//! live with its state held, and the chat's agent is started afresh (a new
//! conversation, `resume: false`) just before the chat's next send. The
//! backend takes a chat's commands in issue order, so the send reaches the
//! new agent.

use ahp_types::Uri;

use super::{Host, Op};
use crate::effect::BackendCmd;
use crate::session::Phase;

impl Host {
    /// `chat`'s agent exited on its own and the session's backend cannot
    /// resume: the session stays live, what the agent had in hand for the
    /// chat is dropped, and its start is owed to the chat's next send.
    /// (Ending the turn may already have let the agents go, for a session
    /// whose creation failed; then the owed start is the session's own.)
    pub(crate) fn agent_exited_for_good(&mut self, session_uri: &Uri, chat: &Uri) {
        let Some(s) = self.sessions.get_mut(session_uri) else { return };
        if s.phase != Phase::Live {
            return;
        }
        s.sends_in_flight.retain(|_, (c, _)| c != chat);
        s.busy_chats.remove(chat);
        s.agents_owed.insert(chat.clone());
        self.mark_activity(session_uri);
    }

    /// Before a send to `chat` of a live session: starts its agent afresh
    /// if it is owed (see [`Host::agent_exited_for_good`]); the answer
    /// records the new conversation id on the chat.
    pub(crate) fn start_owed_agent(&mut self, session_uri: &Uri, chat: &Uri) {
        let Some(s) = self.sessions.get_mut(session_uri) else { return };
        if !s.agents_owed.remove(chat) {
            return;
        }
        let provider = s.record.provider.clone();
        let Some(conversation_id) = s.record.chats.iter().find(|c| c.resource == *chat).map(|c| c.conversation_id.clone()) else {
            return;
        };
        let working_directory = s.record.working_directories.first().cloned();
        let peer_directories = self.sessions.get(session_uri).map(|s| self.peers_for(s)).unwrap_or_default();
        let op = self.backend(
            Op::Start { session: session_uri.clone(), chat: chat.clone() },
            provider,
            chat.clone(),
            BackendCmd::Start { session: session_uri.clone(), conversation_id, working_directory, peer_directories, resume: false },
        );
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.phase_ops.insert(op);
        }
    }
}

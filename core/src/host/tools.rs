//! The host tools' rules (issue 24; `crate::tools` has the types): each
//! `Input::HostTool` is judged here and answered with exactly one
//! `Effect::HostToolAnswer`.

use ahp_types::Uri;

use crate::effect::Effect;
use crate::tools::{HostCallId, HostToolError, HostToolErrorCode, HostToolRequest, HostToolResult};

use super::Host;

impl Host {
    /// `Input::HostTool`: one call of a host tool by the agent in `chat`.
    pub(crate) fn on_host_tool(&mut self, call: HostCallId, chat: &Uri, tool: HostToolRequest) {
        let result: HostToolResult = match self.shared.chats.get(chat) {
            None => Err(HostToolError::new(HostToolErrorCode::NotFound, format!("chat {chat} does not exist (any more)"))),
            Some(_) => Err(HostToolError::new(HostToolErrorCode::Unavailable, format!("{} is not built yet", tool.name()))),
        };
        self.answer_tool(call, result);
    }

    /// Queues the one answer to `call`.
    pub(crate) fn answer_tool(&mut self, call: HostCallId, result: HostToolResult) {
        self.shared.effects.push(Effect::HostToolAnswer { call, result });
    }
}

//! The bits of a chat's and a session's `status` (AHP `SessionStatus`, the
//! Sessions page, "The status bitset"): the activity and the read and
//! archived flags. They live with the record, whose chats store them
//! (`ChatRecord::status`); the session's protocol shapes
//! (`crate::session::state`, which re-exports them) and the kept turns
//! (`crate::kept_turns`) read and set them from here.

use ahp_types::state::SessionStatus;

/// Activity bits of a status (mask 0x1F): Idle, Error, InProgress,
/// InputNeeded.
pub const ACTIVITY_MASK: u32 = 0x1F;
/// Activity: nothing is running (1).
pub const IDLE: u32 = SessionStatus::Idle.0;
/// Activity: the last turn ended badly (2).
pub const ERROR: u32 = SessionStatus::Error.0;
/// Activity: a turn is running (8).
pub const IN_PROGRESS: u32 = SessionStatus::InProgress.0;
/// Activity: waiting on somebody (24); carries the [`IN_PROGRESS`] bit, so
/// it is tested first.
pub const INPUT_NEEDED: u32 = SessionStatus::InputNeeded.0;
/// Status flag: read (32).
pub const IS_READ: u32 = SessionStatus::IsRead.0;
/// Status flag: archived (64).
pub const IS_ARCHIVED: u32 = SessionStatus::IsArchived.0;

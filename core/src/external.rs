//! External sessions and which a listing shows (Sessions page, "Finding
//! one": "the root config's showExternalSessions says which a listing
//! shows").

use std::collections::BTreeSet;

use ahp_types::Uri;
use serde::{Deserialize, Serialize};

use crate::time::WallTime;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// The `showExternalSessions` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ExternalMode {
    /// Shows none (the default).
    #[default]
    #[serde(rename = "none")]
    None,
    /// The two updated most recently in the last seven days, none older
    /// than the second most recent update of a session of this host's own
    /// when the first listing ran.
    #[serde(rename = "recent")]
    Recent,
    /// Updated in the last 24 hours.
    #[serde(rename = "last24Hours")]
    Last24Hours,
    /// Updated in the last 7 days.
    #[serde(rename = "last7Days")]
    Last7Days,
    /// Updated in the last 30 days.
    #[serde(rename = "last30Days")]
    Last30Days,
}

impl ExternalMode {
    /// Every mode, in the order a picker lists them.
    pub const ALL: [ExternalMode; 5] =
        [ExternalMode::None, ExternalMode::Recent, ExternalMode::Last24Hours, ExternalMode::Last7Days, ExternalMode::Last30Days];

    /// The wire value, e.g. `last24Hours`.
    pub fn name(self) -> &'static str {
        match self {
            ExternalMode::None => "none",
            ExternalMode::Recent => "recent",
            ExternalMode::Last24Hours => "last24Hours",
            ExternalMode::Last7Days => "last7Days",
            ExternalMode::Last30Days => "last30Days",
        }
    }

    /// Parses a wire value.
    pub fn parse(text: &str) -> Option<ExternalMode> {
        ExternalMode::ALL.into_iter().find(|m| m.name() == text)
    }
}

/// Which external sessions one listing shows, computed once per listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalFilter {
    /// None.
    Hide,
    /// Those updated at or after this time (windows are inclusive).
    Since(WallTime),
    /// Exactly these.
    Only(BTreeSet<Uri>),
}

impl ExternalFilter {
    /// Builds the filter for `mode` at `now`.
    ///
    /// `externals` are `(modifiedAt, uri)` of every external session;
    /// `recent_cutoff` is the second most recent update of a session of this
    /// host's own when the first listing ran (`None`: fewer than two, so the
    /// seven-day window alone applies).
    pub fn new(mode: ExternalMode, now: WallTime, externals: &[(WallTime, Uri)], recent_cutoff: Option<WallTime>) -> ExternalFilter {
        match mode {
            ExternalMode::None => ExternalFilter::Hide,
            ExternalMode::Last24Hours => ExternalFilter::Since(WallTime(now.0 - DAY_MS)),
            ExternalMode::Last7Days => ExternalFilter::Since(WallTime(now.0 - 7 * DAY_MS)),
            ExternalMode::Last30Days => ExternalFilter::Since(WallTime(now.0 - 30 * DAY_MS)),
            ExternalMode::Recent => {
                let floor = ExternalFilter::recent_floor(now, recent_cutoff);
                let mut candidates: Vec<&(WallTime, Uri)> = externals.iter().filter(|(t, _)| *t >= floor).collect();
                candidates.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
                ExternalFilter::Only(candidates.into_iter().take(2).map(|(_, u)| u.clone()).collect())
            }
        }
    }

    /// The oldest update the `recent` mode shows at `now`: seven days back,
    /// or the cutoff fixed at the first listing when that is later.
    pub fn recent_floor(now: WallTime, recent_cutoff: Option<WallTime>) -> WallTime {
        WallTime(now.0 - 7 * DAY_MS).max(recent_cutoff.unwrap_or(WallTime(i64::MIN)))
    }

    /// Whether an external session with this row is shown.
    pub fn shows(&self, modified_at: WallTime, uri: &str) -> bool {
        match self {
            ExternalFilter::Hide => false,
            ExternalFilter::Since(t) => modified_at >= *t,
            ExternalFilter::Only(set) => set.contains(uri),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_inclusive_and_recent_takes_two() {
        let now = WallTime(100 * DAY_MS);
        let f = ExternalFilter::new(ExternalMode::Last24Hours, now, &[], None);
        assert!(f.shows(WallTime(99 * DAY_MS), "a"));
        assert!(!f.shows(WallTime(99 * DAY_MS - 1), "a"));
        let rows = vec![
            (WallTime(99 * DAY_MS), "x:/1".to_owned()),
            (WallTime(98 * DAY_MS), "x:/2".to_owned()),
            (WallTime(97 * DAY_MS), "x:/3".to_owned()),
            (WallTime(80 * DAY_MS), "x:/old".to_owned()),
        ];
        let recent = ExternalFilter::new(ExternalMode::Recent, now, &rows, None);
        assert!(recent.shows(WallTime(0), "x:/1") && recent.shows(WallTime(0), "x:/2"));
        assert!(!recent.shows(WallTime(0), "x:/3"));
        let cut = ExternalFilter::new(ExternalMode::Recent, now, &rows, Some(WallTime(98 * DAY_MS + 1)));
        assert!(cut.shows(WallTime(0), "x:/1") && !cut.shows(WallTime(0), "x:/2"));
        assert!(!ExternalFilter::new(ExternalMode::None, now, &rows, None).shows(now, "x:/1"));
        assert_eq!(ExternalMode::parse("last7Days"), Some(ExternalMode::Last7Days));
        assert_eq!(ExternalMode::parse("all"), None);
    }
}

//! A run's history: its [`Milestone`]s as timestamped [`Event`]s, for stores and pages.
//!
//! [`recorder`] is the one place milestones become events. An event holds kinds, sizes and
//! durations only: no URL, no cookie, no checkpoint content, no error text.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::report::{Milestone, WideEvent};

/// One step of a run's history.
///
/// Serialised with a `kind` tag (`entered`, `died`, …) and its fields in camelCase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
#[non_exhaustive]
pub enum Step {
    /// A worker took a durable run for the first time.
    Pickup,
    /// A worker took a durable run over from one that stopped under it.
    Takeover,
    /// A browser was launched and connected.
    Launched {
        /// The launch and the connection, in milliseconds.
        took_ms: u64,
    },
    /// A launch failed (its error is not kept: it may name a host).
    LaunchFailed,
    /// A checkpoint was restored into a new browser.
    Restored {
        /// Restore and navigation, in milliseconds.
        took_ms: u64,
    },
    /// The task was entered.
    Entered {
        /// Its attempt: 1, 2, …
        attempt: u32,
        /// Whether a checkpoint was restored for it.
        resumed: bool,
    },
    /// A checkpoint was written: its size, never its content.
    Checkpointed {
        /// Approximate size of the captured state.
        bytes: u64,
        /// The capture, in milliseconds.
        took_ms: u64,
    },
    /// A browser died.
    Died {
        /// The entry that was running (0: none yet).
        attempt: u32,
        /// What gave the death away ([`DeathCause::as_str`](crate::DeathCause::as_str)).
        cause: String,
        /// How it was made sure of ([`Confirmation::as_str`](crate::Confirmation::as_str)).
        confirmed: Option<String>,
        /// Work lost, as `lostWorkMs` counts it.
        lost_ms: u64,
        /// Work the task redoes, as `redoneMs` counts it.
        redone_ms: u64,
    },
    /// The task's page failed while its browser lived on.
    PageFailed {
        /// The entry that was running.
        attempt: u32,
        /// What gave the failure away.
        cause: String,
        /// Work the task redoes.
        redone_ms: u64,
    },
    /// The task moved to a new browser ahead of a predicted death.
    Rotated {
        /// The entry that ended.
        attempt: u32,
        /// Work the task redoes.
        redone_ms: u64,
    },
    /// The run was cancelled.
    Cancelled,
    /// The run ended.
    Finished {
        /// `completed`, `failed` or `gave_up`.
        outcome: String,
    },
}

impl Step {
    /// The step a milestone is, if it is one a history keeps.
    pub fn of(milestone: &Milestone) -> Option<Step> {
        Some(match milestone {
            Milestone::Launched { took } => Step::Launched { took_ms: ms(*took) },
            Milestone::LaunchFailed { .. } => Step::LaunchFailed,
            Milestone::Restored { restore, navigate } => Step::Restored {
                took_ms: ms(*restore + *navigate),
            },
            Milestone::Entered {
                attempt, resumed, ..
            } => Step::Entered {
                attempt: *attempt,
                resumed: *resumed,
            },
            Milestone::Checkpointed { took, bytes } => Step::Checkpointed {
                bytes: *bytes as u64,
                took_ms: ms(*took),
            },
            Milestone::Died {
                attempt,
                cause,
                confirmed,
                lost_work,
                redone,
                ..
            } => Step::Died {
                attempt: *attempt,
                cause: cause.as_str().to_owned(),
                confirmed: confirmed.map(|c| c.as_str().to_owned()),
                lost_ms: ms(*lost_work),
                redone_ms: ms(*redone),
            },
            Milestone::PageFailed {
                attempt,
                cause,
                redone,
                ..
            } => Step::PageFailed {
                attempt: *attempt,
                cause: cause.as_str().to_owned(),
                redone_ms: ms(*redone),
            },
            Milestone::Rotated {
                attempt, redone, ..
            } => Step::Rotated {
                attempt: *attempt,
                redone_ms: ms(*redone),
            },
            _ => return None,
        })
    }

    /// The end of a run, from its wide event.
    pub fn finished(event: &WideEvent) -> Step {
        Step::Finished {
            outcome: event.outcome.as_str().to_owned(),
        }
    }

    /// The `kind` tag: `entered`, `died`, …
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Pickup => "pickup",
            Step::Takeover => "takeover",
            Step::Launched { .. } => "launched",
            Step::LaunchFailed => "launch_failed",
            Step::Restored { .. } => "restored",
            Step::Entered { .. } => "entered",
            Step::Checkpointed { .. } => "checkpointed",
            Step::Died { .. } => "died",
            Step::PageFailed { .. } => "page_failed",
            Step::Rotated { .. } => "rotated",
            Step::Cancelled => "cancelled",
            Step::Finished { .. } => "finished",
        }
    }

    /// The step's fields as a JSON object, without its `kind`.
    pub fn detail(&self) -> serde_json::Value {
        let mut json = serde_json::to_value(self).expect("a step always serialises");
        if let Some(object) = json.as_object_mut() {
            object.remove("kind");
        }
        json
    }

    /// The step of `kind` with fields `detail` (as [`Step::kind`] and [`Step::detail`] made).
    ///
    /// # Errors
    ///
    /// When they do not make a step.
    pub fn from_parts(kind: &str, detail: serde_json::Value) -> Result<Step, serde_json::Error> {
        let mut object = match detail {
            serde_json::Value::Object(o) => o,
            _ => serde_json::Map::new(),
        };
        object.insert("kind".to_owned(), kind.into());
        serde_json::from_value(serde_json::Value::Object(object))
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A step and when it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// What.
    #[serde(flatten)]
    pub step: Step,
}

impl Event {
    /// `step`, now.
    pub fn now(step: Step) -> Event {
        Event::ago(step, Duration::ZERO)
    }

    /// `step`, `ago` before now.
    fn ago(step: Step, ago: Duration) -> Event {
        let at = SystemTime::now().checked_sub(ago).unwrap_or(UNIX_EPOCH);
        let at_ms = at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Event { at_ms, step }
    }

    /// The event a milestone is, if it is one a history keeps. A death is dated when it was
    /// detected (it is reported after the grace), the rest when reported.
    pub fn of(milestone: &Milestone) -> Option<Event> {
        let step = Step::of(milestone)?;
        let ago = match milestone {
            Milestone::Died { detected_at, .. } | Milestone::PageFailed { detected_at, .. } => {
                detected_at.elapsed()
            }
            _ => Duration::ZERO,
        };
        Some(Event::ago(step, ago))
    }
}

/// A milestone callback for [`Options::on_milestone`](crate::Options::on_milestone) that
/// hands each milestone a history keeps to `sink`, as an [`Event`] ([`Event::of`]).
pub fn recorder(
    sink: impl Fn(Event) + Send + Sync + 'static,
) -> impl Fn(&Milestone) + Send + Sync + 'static {
    let sink = Arc::new(sink);
    move |milestone| {
        if let Some(event) = Event::of(milestone) {
            sink(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_goes_through_kind_and_detail_and_back() {
        let died = Step::Died {
            attempt: 2,
            cause: "closed".into(),
            confirmed: Some("close".into()),
            lost_ms: 10,
            redone_ms: 20,
        };
        assert_eq!(died.kind(), "died");
        let detail = died.detail();
        assert_eq!(detail["redoneMs"], 20);
        assert!(detail.get("kind").is_none());
        assert_eq!(Step::from_parts("died", detail).unwrap(), died);
        let pickup = Step::from_parts("pickup", serde_json::json!({})).unwrap();
        assert_eq!(pickup, Step::Pickup);
    }

    #[test]
    fn a_checkpoint_keeps_its_size_and_nothing_else() {
        let step = Step::of(&Milestone::Checkpointed {
            took: Duration::from_millis(7),
            bytes: 1234,
        })
        .unwrap();
        let json = serde_json::to_string(&Event { at_ms: 5, step }).unwrap();
        assert_eq!(
            json,
            r#"{"atMs":5,"kind":"checkpointed","bytes":1234,"tookMs":7}"#
        );
    }
}

//! The wide event: one structured record per run, on every path.

use serde::Serialize;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The task returned `Ok`.
    Completed,
    /// The task returned `Err` with its browser alive, panicked, an option was invalid, or
    /// the caller dropped the run.
    Failed,
    /// The browser died (or failed to launch) more than `max_relaunches` times in a row (or
    /// the page failed more than `max_page_recoveries` times in a row) without progress
    /// between, or the run would need more than `max_sessions` sessions.
    GaveUp,
}

impl Outcome {
    /// `"completed"`, `"failed"` or `"gave_up"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::GaveUp => "gave_up",
        }
    }
}

/// One record per run. Serialises with the same JSON field names as the TypeScript original
/// (`runId`, `checkpointCount`, `lostWorkMs`, …).
///
/// It carries no secret outlive holds: no cookie, no checkpoint, no URL. `error` is redacted
/// under [`Diagnostics::Safe`](crate::Diagnostics::Safe).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WideEvent {
    /// Random id of this run.
    pub run_id: String,
    /// How the run ended.
    pub outcome: Outcome,
    /// Browsers launched to replace one that died or failed to launch.
    pub relaunches: u32,
    /// Checkpoints written (automatic and `ctx.checkpoint()`).
    pub checkpoint_count: u32,
    /// Sum over deaths of the work lost: from the newest checkpoint (or the start of the
    /// entry that died, if later) to the moment the death was detected, grace excluded.
    pub lost_work_ms: u64,
    /// The worst single death by the same rule.
    pub max_lost_work_ms: u64,
    /// Sum over cuts (deaths, page failures, rotations) of the work the task had to do again:
    /// from its own last checkpoint in the entry (`ctx.checkpoint()`, `checkpoint_with`, a
    /// control request), or the entry's start if it made none, to the cut. Unlike
    /// `lostWorkMs`, automatic checkpoints do not shorten it: a re-entered task starts over
    /// from what it saved itself. Not in the TypeScript original.
    pub redone_ms: u64,
    /// The worst single cut by the same rule.
    pub max_redone_ms: u64,
    /// Wall time of the whole run.
    pub total_ms: u64,
    /// Entries of the task (1 when no browser died).
    pub attempts: u32,
    /// Sessions whose release could not be confirmed. Anything but 0 means a browser may
    /// still be holding a slot.
    pub release_failed: u32,
    /// Times the task's page failed (crashed, was closed, hung) and a fresh page in the same
    /// browser took over, without a relaunch. Not in the TypeScript original.
    pub page_recoveries: u32,
    /// Client-side state the run could not carry across, counted in the checkpoint that held
    /// most of it. Database records whose values cannot be serialised, or databases over
    /// [`Options::indexed_db_max_bytes`](crate::Options::indexed_db_max_bytes); frames whose
    /// storage could not be read; writes that failed while restoring. 0 means everything captured came back. Not in the
    /// TypeScript original.
    pub state_left_out: u64,
    /// Times the task moved to a new browser ahead of a predicted death, at a safe point
    /// ([`Options::rotation`](crate::Options::rotation)). Not deaths: they lose no work and are
    /// not in `relaunches`. Not in the TypeScript original.
    pub rotations: u32,
    /// Browser sessions the run started: the first, every relaunch, every rotation's
    /// successor and every standby. What a provider bills. Not in the TypeScript original.
    pub sessions: u32,
    /// Time successors and standbys were up beside the task's browser (launched, not yet
    /// serving the task): the extra session time rotation and standby cost. Not in the
    /// TypeScript original.
    pub standby_ms: u64,
    /// Silences that raised a suspicion of death and ended with the connection heard again:
    /// network stalls outlive waited out instead of replacing a live browser
    /// (`docs/deaths.md`). Not in the TypeScript original.
    pub stalls_survived: u32,
    /// The longest of them.
    pub longest_stall_ms: u64,
    /// Browser deaths by how each was made sure of
    /// ([`Confirmation::as_str`](crate::Confirmation::as_str): `close`, `reset`, `refused`,
    /// `silence`, `exit`). Not in the TypeScript original.
    pub deaths_confirmed_by: std::collections::BTreeMap<String, u32>,
    /// Client connections [`serve`](crate::serve) carried through a death to the next browser
    /// (`docs/run-and-serve.md`). Not in the TypeScript original.
    pub clients_carried: u32,
    /// The longest of those swaps: from the death seen at the endpoint to the client's pages
    /// loaded on the next browser.
    pub longest_carry_ms: u64,
    /// Client connections closed at a death instead, by why (`interception`, `download`,
    /// `tab_not_reopened`, …). Not in the TypeScript original.
    pub client_fallbacks: std::collections::BTreeMap<String, u32>,
    /// On failure: the kind of error (`"GaveUp"`, `"InvalidOption"`, `"Panic"`, or the
    /// task error's type name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_name: Option<String>,
    /// On failure: a stable code (`"gave_up"`, `"invalid_option"`, `"task_error"`, `"panic"`,
    /// `"cancelled"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// On failure: the error's message; under [`Diagnostics::Safe`](crate::Diagnostics::Safe)
    /// (the default) redacted and clipped to 300 characters, under `Full` as it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl WideEvent {
    /// The event as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a WideEvent always serialises")
    }

    pub(crate) fn emit(&self, on_event: Option<&(dyn Fn(&WideEvent) + Send + Sync)>) {
        tracing::info!(
            target: "outlive::event",
            run_id = %self.run_id,
            outcome = self.outcome.as_str(),
            relaunches = self.relaunches,
            checkpoint_count = self.checkpoint_count,
            lost_work_ms = self.lost_work_ms,
            max_lost_work_ms = self.max_lost_work_ms,
            redone_ms = self.redone_ms,
            max_redone_ms = self.max_redone_ms,
            total_ms = self.total_ms,
            attempts = self.attempts,
            release_failed = self.release_failed,
            page_recoveries = self.page_recoveries,
            state_left_out = self.state_left_out,
            rotations = self.rotations,
            sessions = self.sessions,
            standby_ms = self.standby_ms,
            error_name = self.error_name.as_deref(),
            error_code = self.error_code.as_deref(),
            error = self.error.as_deref(),
            "outlive run finished"
        );
        if let Some(f) = on_event {
            f(self);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_with_the_original_field_names() {
        let event = WideEvent {
            run_id: "r".into(),
            outcome: Outcome::GaveUp,
            relaunches: 1,
            checkpoint_count: 24,
            lost_work_ms: 2315,
            max_lost_work_ms: 2315,
            redone_ms: 4000,
            max_redone_ms: 4000,
            total_ms: 751_943,
            attempts: 2,
            release_failed: 0,
            page_recoveries: 0,
            state_left_out: 0,
            rotations: 0,
            sessions: 2,
            standby_ms: 0,
            stalls_survived: 0,
            longest_stall_ms: 0,
            deaths_confirmed_by: Default::default(),
            clients_carried: 0,
            longest_carry_ms: 0,
            client_fallbacks: Default::default(),
            error_name: Some("GaveUp".into()),
            error_code: Some("gave_up".into()),
            error: Some("x".into()),
        };
        let json: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
        for key in [
            "runId",
            "outcome",
            "relaunches",
            "checkpointCount",
            "lostWorkMs",
            "stateLeftOut",
            "maxLostWorkMs",
            "redoneMs",
            "maxRedoneMs",
            "totalMs",
            "attempts",
            "releaseFailed",
            "pageRecoveries",
            "rotations",
            "sessions",
            "standbyMs",
            "clientsCarried",
            "longestCarryMs",
            "clientFallbacks",
            "errorName",
            "errorCode",
            "error",
        ] {
            assert!(json.get(key).is_some(), "missing {key}");
        }
        assert_eq!(json["outcome"], "gave_up");
    }
}

/// A step of a run, reported as it happens to [`Options::on_milestone`](crate::Options::on_milestone):
/// for progress displays and measurements. Quiet unless asked for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Milestone {
    /// A browser was launched and connected, its page ready.
    Launched {
        /// The provider's launch plus the CDP connection.
        took: std::time::Duration,
    },
    /// A launch failed; `relaunch_backoff` follows.
    LaunchFailed {
        /// The error, redacted as `diagnostics` says.
        error: String,
    },
    /// A checkpoint was restored into a new browser.
    Restored {
        /// Cookies and every origin's localStorage put in place.
        restore: std::time::Duration,
        /// The navigation to the checkpoint URL.
        navigate: std::time::Duration,
    },
    /// The task was entered.
    Entered {
        /// `ctx.attempt()`.
        attempt: u32,
        /// Whether a checkpoint was restored.
        resumed: bool,
        /// From the death's detection to this entry (launch, restore, navigate).
        replaced_in: Option<std::time::Duration>,
    },
    /// Under [`serve`](crate::serve), a client's connection was carried to the browser that
    /// replaced a dead one: its pages loaded there, its waiting calls sent.
    ClientCarried {
        /// From the death seen at the endpoint to now.
        took: std::time::Duration,
        /// Now.
        at: std::time::Instant,
    },
    /// A checkpoint was written.
    Checkpointed {
        /// The capture's duration.
        took: std::time::Duration,
        /// Approximate size of the captured state.
        bytes: usize,
    },
    /// A browser died.
    Died {
        /// The entry that was running (0 if the death came before the task was entered).
        attempt: u32,
        /// What gave the death away.
        cause: crate::DeathCause,
        /// How it was made sure of.
        confirmed: Option<crate::Confirmation>,
        /// When it was detected.
        detected_at: std::time::Instant,
        /// The work lost by this death, as `lost_work_ms` counts it.
        lost_work: std::time::Duration,
        /// The work the task redoes after it, as `redone_ms` counts it.
        redone: std::time::Duration,
    },
    /// The task's page failed (crashed, was closed, hung) while its browser lived on.
    PageFailed {
        /// The entry that was running (0 if the failure came before the task was entered).
        attempt: u32,
        /// What gave the failure away (a `Page*` cause).
        cause: crate::DeathCause,
        /// When it was detected.
        detected_at: std::time::Instant,
        /// The work lost by this failure, as `lost_work_ms` counts it.
        lost_work: std::time::Duration,
        /// The work the task redoes after it, as `redone_ms` counts it.
        redone: std::time::Duration,
    },
    /// A successor browser for a rotation (or a standby) is launched and restored, waiting.
    SuccessorReady {
        /// From the start of its launch to restored.
        took: std::time::Duration,
        /// Whether it is a standby (kept for unplanned deaths) rather than a rotation's
        /// successor.
        standby: bool,
    },
    /// The entry ended at a safe point and the task moves to the successor.
    Rotated {
        /// The entry that ended.
        attempt: u32,
        /// The age of the browser it leaves (from the start of its launch).
        age: std::time::Duration,
        /// From the safe point's checkpoint (its capture start) to the entry's end.
        lost_work: std::time::Duration,
        /// From the task's own last checkpoint in the entry (or the entry's start) to its
        /// end: the work the next entry repeats, as `redone_ms` counts it.
        redone: std::time::Duration,
    },
    /// A fresh page in the same browser took over from a failed one; the checkpoint is
    /// restored into it next.
    PageRecovered {
        /// From the failure's detection to the fresh page being open (grace included when
        /// the entry used it).
        took: std::time::Duration,
    },
}

impl Milestone {
    /// Logs the milestones a trace shows as events, in the current span (the run's), target
    /// `outlive::milestone`. The others have a line or a span of their own already:
    /// `browser launched` (every launch, by the backend), `entering the task`, `launch
    /// failed`, the `checkpoint` span, a carried client's line.
    pub(crate) fn trace(&self) {
        // Numbers as `i64`: `tracing-opentelemetry` sends a `u64` as text.
        let ms = |d: &std::time::Duration| d.as_millis() as i64;
        match self {
            Milestone::Restored { restore, navigate } => tracing::info!(
                target: "outlive::milestone",
                restore_ms = ms(restore),
                navigate_ms = ms(navigate),
                "checkpoint restored"
            ),
            Milestone::Died {
                attempt,
                cause,
                confirmed,
                lost_work,
                ..
            } => tracing::info!(
                target: "outlive::milestone",
                attempt = i64::from(*attempt),
                cause = cause.as_str(),
                confirmed = confirmed.map(|c| c.as_str()),
                lost_work_ms = ms(lost_work),
                "browser died"
            ),
            Milestone::SuccessorReady { took, standby } => tracing::info!(
                target: "outlive::milestone",
                took_ms = ms(took),
                standby,
                "successor ready"
            ),
            Milestone::Rotated { attempt, age, .. } => tracing::info!(
                target: "outlive::milestone",
                attempt = i64::from(*attempt),
                age_ms = ms(age),
                "rotated"
            ),
            Milestone::PageRecovered { took } => {
                tracing::info!(target: "outlive::milestone", took_ms = ms(took), "page recovered");
            }
            Milestone::Launched { .. }
            | Milestone::LaunchFailed { .. }
            | Milestone::Entered { .. }
            | Milestone::ClientCarried { .. }
            | Milestone::Checkpointed { .. }
            | Milestone::PageFailed { .. } => {}
        }
    }
}

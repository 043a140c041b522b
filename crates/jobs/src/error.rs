//! The one error type of the jobs library.

use std::fmt;

type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a durable-runs call failed: the database, a task name or declaration, an input, a
/// run id, an option.
///
/// `Display` says what failed at this layer only; the underlying error is in
/// [`source()`](std::error::Error::source). Messages carry no database password and no
/// input or progress (they may be secrets).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: Option<Cause>,
}

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// PostgreSQL refused or could not be reached; `what` says at which step.
    Database {
        /// The step: "connecting", "creating the checkpoint table", "loading a checkpoint", …
        what: &'static str,
    },
    /// A run was submitted for a task no worker declares.
    UnknownTask {
        /// The name asked for.
        name: String,
        /// The names declared.
        known: Vec<String>,
    },
    /// A task declaration (`NAME='CMD ARGS…'`) was refused; the worker did not start.
    InvalidTask {
        /// The task's name (or the whole declaration when it has no `=`).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No run has this id.
    NoSuchRun {
        /// The id asked for.
        run_id: String,
    },
    /// The run is over already (completed, failed or cancelled): nothing to cancel.
    RunOver {
        /// The run.
        run_id: String,
        /// Its status.
        status: String,
    },
    /// A run's input does not fit its task (its input type, or the size cap); the source
    /// says how.
    Input {
        /// The task.
        task: String,
    },
    /// The database lacks the durable-run tables ([`setup`](crate::setup) was never run on
    /// it).
    NotSetUp {
        /// The tables missing.
        missing: Vec<String>,
    },
    /// An option was out of range; nothing was started.
    InvalidOption {
        /// The option's field name.
        option: &'static str,
        /// What is wrong with it.
        message: &'static str,
    },
}

impl Error {
    /// An error of `kind` without a cause.
    pub(crate) fn new(kind: ErrorKind) -> Self {
        Error { kind, source: None }
    }

    /// An error of `kind` caused by `source`.
    pub(crate) fn with(kind: ErrorKind, source: impl Into<Cause>) -> Self {
        Error {
            kind,
            source: Some(source.into()),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Database { what } => write!(
                f,
                "PostgreSQL failed while {what} (is it running and reachable at the URL given?)"
            ),
            ErrorKind::UnknownTask { name, known } => write!(
                f,
                "no task named {name:?}; the tasks are: {}",
                known.join(", ")
            ),
            ErrorKind::InvalidTask { name, reason } => {
                write!(f, "task {name:?} cannot be declared: {reason}")
            }
            ErrorKind::NoSuchRun { run_id } => {
                write!(f, "no run {run_id:?} (`outlive runs` lists them)")
            }
            ErrorKind::RunOver { run_id, status } => {
                write!(f, "run {run_id:?} is {status} already: nothing to cancel")
            }
            ErrorKind::Input { task } => write!(f, "the input does not fit task {task:?}"),
            ErrorKind::NotSetUp { missing } => write!(
                f,
                "the durable-run tables are missing ({}): create them once, as a role that may \
                 (`outlive worker`, `outlive submit` or `outlive runs` does it; in Rust, \
                 `outlive_jobs::setup`)",
                missing.join(", ")
            ),
            ErrorKind::InvalidOption { option, message } => {
                write!(f, "invalid option `{option}`: {message}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A database step that failed: `what` it was doing.
pub(crate) fn db(what: &'static str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::with(ErrorKind::Database { what }, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_does_not_repeat_the_cause() {
        let err = Error::with(
            ErrorKind::Database { what: "connecting" },
            std::io::Error::other("refused"),
        );
        assert!(
            err.to_string()
                .starts_with("PostgreSQL failed while connecting")
        );
        let source = std::error::Error::source(&err).expect("a source");
        assert_eq!(source.to_string(), "refused");
    }
}

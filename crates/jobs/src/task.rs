//! [`Tasks`]: tasks by name, Rust functions with a serde input or commands.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;

use outlive::{BoxFuture, Ctx, Options, Page, Provider};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::command::{MAX_INPUT_BYTES, parse_task};
use crate::error::{Error, ErrorKind};
use crate::finish::{Finished, stopped};

type Erased = Arc<
    dyn Fn(
            serde_json::Value,
            Arc<dyn Provider>,
            Options,
            watch::Receiver<bool>,
        ) -> BoxFuture<'static, Finished>
        + Send
        + Sync,
>;
type Check = Arc<dyn Fn(&serde_json::Value) -> Result<(), String> + Send + Sync>;

/// One task: a Rust function, or a command.
#[derive(Clone)]
pub(crate) enum Task {
    Rust { run: Erased, check: Check },
    Command(outlive::Command),
}

/// Tasks by name. A Rust task takes a serde input (checked when a run is submitted, and again
/// when a worker takes it). It runs through outlive with the page and [`Ctx`] of each entry.
/// A command task takes any JSON input and runs as `outlive run -- CMD` runs it. A durable
/// task keeps its progress in its checkpoints ([`Ctx::checkpoint_with`], or `POST
/// $OUTLIVE_CONTROL_URL/checkpoint` from a command), never in memory outside the task: the
/// next entry may run in another process.
#[derive(Clone, Default)]
pub struct Tasks {
    pub(crate) by_name: BTreeMap<String, Task>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.by_name.keys()).finish()
    }
}

impl Tasks {
    /// No tasks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `task` under `name`: each entry gets the run's input, the page and the
    /// entry's [`Ctx`]; what it returns (serialised) is the run's result.
    #[must_use]
    pub fn register<I, F, Fut, T, E>(mut self, name: impl Into<String>, task: F) -> Self
    where
        I: DeserializeOwned + Send + Sync + 'static,
        F: Fn(Arc<I>, Page, Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize + Send + 'static,
        E: Display + Send + 'static,
    {
        let task = Arc::new(task);
        let run: Erased = Arc::new(move |input, provider, options, stop| {
            let task = task.clone();
            Box::pin(async move {
                let input: Arc<I> = match serde_json::from_value(input) {
                    Ok(i) => Arc::new(i),
                    Err(e) => {
                        return Finished {
                            result: Err(format!("the input does not fit the task: {e}")),
                            event: None,
                        };
                    }
                };
                let run = outlive::outlive_with_event(
                    provider.as_ref(),
                    |page, ctx| task(input.clone(), page, ctx),
                    options,
                );
                // Stopped: the entry is dropped, and its browser released with it.
                let outlive::Reported { result, event } = tokio::select! {
                    ran = run => ran,
                    () = stopped(stop) => {
                        return Finished {
                            result: Err("stopped".to_owned()),
                            event: None,
                        };
                    }
                };
                let result = match result {
                    Ok(v) => serde_json::to_value(v)
                        .map_err(|e| format!("the result does not serialise: {e}")),
                    Err(e) => Err(e.to_string()),
                };
                Finished {
                    result,
                    event: Some(event),
                }
            })
        });
        let check: Check = Arc::new(|input| {
            serde_json::from_value::<I>(input.clone())
                .map(drop)
                .map_err(|e| e.to_string())
        });
        self.by_name.insert(name.into(), Task::Rust { run, check });
        self
    }

    /// Registers `command` under `name` (see [`parse_task`] for `NAME='CMD ARGS…'`): each run
    /// runs it as `outlive run -- CMD` does, with the run's input, as JSON, in
    /// `OUTLIVE_INPUT`; `OUTLIVE_ATTEMPT` and `OUTLIVE_PROGRESS` go on across workers. It
    /// completes when the command exits 0 (result `{"exitCode": 0}`), and fails when the
    /// command fails with its browser alive.
    #[must_use]
    pub fn command(mut self, name: impl Into<String>, command: outlive::Command) -> Self {
        self.by_name.insert(name.into(), Task::Command(command));
        self
    }

    /// Registers the command task of a declaration, `NAME='CMD ARGS…'` ([`parse_task`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidTask`] when it does not parse, its program is not found, or its
    /// name is already registered.
    pub fn declare(self, declaration: &str) -> Result<Self, Error> {
        let (name, command) = parse_task(declaration)?;
        if self.by_name.contains_key(&name) {
            return Err(Error::new(ErrorKind::InvalidTask {
                name,
                reason: "declared twice (or the name of a task already registered)".to_owned(),
            }));
        }
        Ok(self.command(name, command))
    }

    /// The registered names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// Checks that `name` is registered and `input` fits it: a Rust task's input type, or
    /// for a command any JSON up to [`MAX_INPUT_BYTES`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::UnknownTask`]; [`ErrorKind::Input`] with what in the input does not fit.
    pub fn check(&self, name: &str, input: &serde_json::Value) -> Result<(), Error> {
        let task = self.by_name.get(name).ok_or_else(|| {
            Error::new(ErrorKind::UnknownTask {
                name: name.to_owned(),
                known: self.names().map(str::to_owned).collect(),
            })
        })?;
        check_size(name, input)?;
        match task {
            Task::Rust { check, .. } => check(input).map_err(|e| {
                Error::with(
                    ErrorKind::Input {
                        task: name.to_owned(),
                    },
                    e,
                )
            }),
            Task::Command(_) => Ok(()),
        }
    }
}

/// Refuses an input over [`MAX_INPUT_BYTES`].
pub(crate) fn check_size(task: &str, input: &serde_json::Value) -> Result<(), Error> {
    let len = input.to_string().len();
    if len > MAX_INPUT_BYTES {
        return Err(Error::with(
            ErrorKind::Input {
                task: task.to_owned(),
            },
            format!(
                "the input is {len} bytes of JSON, over the cap of {MAX_INPUT_BYTES}: pass a \
                 reference (a URL, a key) to the data instead"
            ),
        ));
    }
    Ok(())
}

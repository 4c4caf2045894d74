//! What the selftest records: one row per step, with what Windows answered.

use std::time::{Duration, Instant};

/// One step of the selftest.
#[derive(Debug, Clone)]
pub struct Step {
    /// The call or check, e.g. `PartitionDisk`.
    pub name: String,
    /// Whether it did what the selftest expects (false for a step that did not run).
    pub ok: bool,
    /// Whether it ran: an optional step the operator gave nothing for is listed, not run,
    /// with what it needs in `answer`.
    pub ran: bool,
    /// How long it took.
    pub time: Duration,
    /// What Windows (through the daemon or the virtual disk API) answered, or why it failed.
    pub answer: String,
}

/// Every step run, in order.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The steps, the clean-up steps last.
    pub steps: Vec<Step>,
}

impl Outcome {
    /// The first step that failed, if any.
    pub fn failed(&self) -> Option<&Step> {
        self.steps.iter().find(|s| s.ran && !s.ok)
    }

    /// An outcome of one failed step, for a selftest that cannot start.
    pub fn failed_at(step: &str, why: &str) -> Self {
        Outcome {
            steps: vec![Step {
                name: step.into(),
                ok: false,
                ran: true,
                time: Duration::ZERO,
                answer: why.into(),
            }],
        }
    }

    pub(super) fn record<T>(
        &mut self,
        name: impl Into<String>,
        started: Instant,
        result: Result<(T, String), String>,
    ) -> Result<T, Stop> {
        let (ok, answer, value) = match result {
            Ok((v, a)) => (true, a, Some(v)),
            Err(a) => (false, a, None),
        };
        self.steps.push(Step {
            name: name.into(),
            ok,
            ran: true,
            time: started.elapsed(),
            answer,
        });
        value.ok_or(Stop)
    }

    /// Lists an optional step that did not run, and why (what the operator did not give).
    pub(super) fn not_run(&mut self, name: impl Into<String>, why: impl Into<String>) {
        self.steps.push(Step {
            name: name.into(),
            ok: false,
            ran: false,
            time: Duration::ZERO,
            answer: why.into(),
        });
    }
}

/// A step failed: the flow stops there (the clean-up still runs).
#[derive(Debug)]
pub struct Stop;

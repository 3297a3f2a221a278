//! The stuck-loop guard (docs/task-file.md): after every step it looks at what the step did — its actions, whether they
//! changed the screen, whether the turn called anything — and counts, for each check, the steps (or turns) in
//! a row that made no progress. When a count reaches its threshold the model is warned, with what it
//! repeats; when the same count reaches it again the task ends with reason `stuck`. Progress on a check
//! (a changed screen, other actions, a call) resets that check's count and warning.
//!
//! Pure bookkeeping over step records, so an attempt that resumes a task replays the earlier steps through
//! it and continues with the same counts.

use agentd_computer::Action;

use crate::record::{GuardNote, StepRecord, StuckCheck};
use crate::task::guard::Guard;

/// What the guard decided after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub note: GuardNote,
    /// The threshold was reached a second time: the task ends `stuck`.
    pub stop: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct Count {
    count: u32,
    warned: bool,
}

impl Count {
    fn progress(&mut self) {
        *self = Self::default();
    }
}

/// The guard of one task's loop.
#[derive(Debug)]
pub struct StuckGuard {
    limits: Guard,
    no_change: Count,
    repeat: Count,
    idle: Count,
    waits: Count,
    last_actions: Option<Vec<Action>>,
}

impl StuckGuard {
    pub fn new(limits: Guard) -> Self {
        Self {
            limits,
            no_change: Count::default(),
            repeat: Count::default(),
            idle: Count::default(),
            waits: Count::default(),
            last_actions: None,
        }
    }

    /// Counts a finished step. `changed_after`: whether the next step's screenshot differs from the step's
    /// own (the loop tolerates a blinking caret: `GUARD_TOLERANCE_PIXELS`; `None`: not known, taken as a
    /// change). Settling's own verdict (`visual_change`) tolerates far more and would miss a typed letter.
    pub fn observe(&mut self, step: &StepRecord, changed_after: Option<bool>) -> Option<Fired> {
        if step.interrupted {
            return None;
        }
        if step.calls.is_empty() {
            self.idle.count += 1;
        } else {
            self.idle.progress();
        }
        if !step.actions.is_empty() {
            let changed = changed_after.unwrap_or(true);
            if changed {
                self.no_change.progress();
                self.repeat.progress();
                self.waits.progress();
            } else if !step.actions.iter().any(Action::is_input) {
                // Waiting (or looking) again is how a slow page or a person is waited for: not a step that
                // changed nothing, and not a repeat; it has its own, larger budget.
                self.waits.count += 1;
                self.repeat.progress();
            } else {
                self.no_change.count += 1;
                if self.last_actions.as_ref() == Some(&step.actions) {
                    self.repeat.count += 1;
                } else {
                    self.repeat = Count { count: 1, warned: false };
                }
            }
            self.last_actions = Some(step.actions.clone());
        }
        // The most specific check first: a repeated action is also a step that changed nothing.
        let repeated = self.last_actions.as_deref().map(describe_actions).unwrap_or_default();
        let checks = [
            (StuckCheck::RepeatActions, self.limits.repeat_actions),
            (StuckCheck::NoChangeSteps, self.limits.no_change_steps),
            (StuckCheck::IdleTurns, self.limits.idle_turns),
            (StuckCheck::WaitSteps, self.limits.wait_steps),
        ];
        for (check, limit) in checks {
            let counter = match check {
                StuckCheck::RepeatActions => &mut self.repeat,
                StuckCheck::NoChangeSteps => &mut self.no_change,
                StuckCheck::IdleTurns => &mut self.idle,
                StuckCheck::WaitSteps => &mut self.waits,
            };
            if limit == 0 || counter.count < limit {
                continue;
            }
            let count = counter.count;
            let stop = counter.warned;
            *counter = Count { count: 0, warned: true };
            let message = message(check, count, &repeated, stop);
            return Some(Fired { note: GuardNote { check, count, message }, stop });
        }
        None
    }
}

/// What the model is told (or the outcome's summary says).
fn message(check: StuckCheck, count: u32, actions: &str, stop: bool) -> String {
    let seen = match check {
        StuckCheck::RepeatActions => {
            format!("the same action ({actions}) was repeated {count} times in a row and the screen did not change")
        }
        StuckCheck::NoChangeSteps => {
            format!("the actions of the last {count} steps changed nothing on the screen (last: {actions})")
        }
        StuckCheck::IdleTurns => {
            format!("the last {count} turns called neither the computer, a tool nor task_completion")
        }
        StuckCheck::WaitSteps => format!("the last {count} steps only waited, and the screen did not change"),
    };
    if stop {
        format!("stuck: {seen}, again after a warning")
    } else {
        format!(
            "Warning from the stuck-loop guard: {seen}. Doing the same again will not help: look at the \
             screenshot, try something different, or call task_completion (with success false if the task \
             cannot be done). If this goes on, the task ends as stuck."
        )
    }
}

/// A short description of a step's actions for a message (`click(100,200), type("abc")`), in the words
/// of the progress lines ([`Action::summary`]).
fn describe_actions(actions: &[Action]) -> String {
    let shown: Vec<String> = actions.iter().take(3).map(Action::summary).collect();
    let more = actions.len().saturating_sub(3);
    if more > 0 { format!("{} and {more} more", shown.join(", ")) } else { shown.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CallKind, ScreenshotRef, ToolCall};

    fn begun() -> StepRecord {
        let screenshot = ScreenshotRef { url: "u".into(), width: 1, height: 1, key: "k".into() };
        StepRecord::begun(0, time::OffsetDateTime::UNIX_EPOCH, screenshot)
    }

    fn step(actions: Vec<Action>) -> StepRecord {
        let mut record = begun();
        record.calls = vec![ToolCall { id: "c".into(), kind: CallKind::Computer { actions: actions.clone() } }];
        record.actions = actions;
        record
    }

    fn click(x: i32) -> Action {
        Action::Click { x, y: 10, button: Default::default(), keys: Vec::new() }
    }

    fn idle() -> StepRecord {
        begun()
    }

    fn run(guard: &mut StuckGuard, steps: &[(StepRecord, bool)]) -> Vec<Option<(StuckCheck, bool)>> {
        steps.iter().map(|(s, changed)| guard.observe(s, Some(*changed)).map(|f| (f.note.check, f.stop))).collect()
    }

    #[test]
    fn a_repeated_click_on_an_unchanged_screen_warns_then_stops() {
        let mut guard = StuckGuard::new(Guard { no_change_steps: 0, repeat_actions: 3, idle_turns: 0, wait_steps: 0 });
        let fired = run(&mut guard, &vec![(step(vec![click(5)]), false); 6]);
        use StuckCheck::RepeatActions as R;
        assert_eq!(fired, vec![None, None, Some((R, false)), None, None, Some((R, true))]);
    }

    #[test]
    fn waiting_on_a_still_screen_has_its_own_budget_not_the_no_change_one() {
        let mut guard = StuckGuard::new(Guard { no_change_steps: 5, repeat_actions: 3, idle_turns: 3, wait_steps: 8 });
        let wait = (step(vec![Action::Wait { duration_ms: 1000 }]), false);
        let fired = run(&mut guard, &vec![wait.clone(); 16]);
        use StuckCheck::WaitSteps as W;
        let expected: Vec<_> = (1..=16)
            .map(|n| match n {
                8 => Some((W, false)),
                16 => Some((W, true)),
                _ => None,
            })
            .collect();
        assert_eq!(fired, expected, "five waits are not stuck; the wait budget warns at 8 and stops at 16");
    }

    #[test]
    fn a_change_resets_the_count_and_the_warning() {
        let mut guard = StuckGuard::new(Guard { no_change_steps: 2, repeat_actions: 0, idle_turns: 0, wait_steps: 0 });
        let (same, moved) = ((step(vec![click(5)]), false), (step(vec![click(6)]), true));
        let fired = run(&mut guard, &[same.clone(), same.clone(), moved, same.clone(), same.clone(), same.clone()]);
        use StuckCheck::NoChangeSteps as N;
        assert_eq!(fired, vec![None, Some((N, false)), None, None, Some((N, false)), None]);
        let fired = run(&mut guard, &[same]);
        assert_eq!(fired, vec![Some((N, true))]);
    }

    #[test]
    fn different_actions_that_change_nothing_count_as_no_change_not_repeats() {
        let mut guard = StuckGuard::new(Guard::default());
        let steps: Vec<_> = (0..5).map(|i| (step(vec![click(i)]), false)).collect();
        let fired = run(&mut guard, &steps);
        assert_eq!(fired[4], Some((StuckCheck::NoChangeSteps, false)));
        assert!(fired[..4].iter().all(Option::is_none), "{fired:?}");
        assert!(guard.observe(&step(vec![click(9)]), Some(false)).is_none());
    }

    #[test]
    fn idle_turns_warn_then_stop_and_a_call_is_progress() {
        let mut guard = StuckGuard::new(Guard { no_change_steps: 0, repeat_actions: 0, idle_turns: 2, wait_steps: 0 });
        let fired = run(&mut guard, &[(idle(), true), (idle(), true), (idle(), true), (idle(), true)]);
        use StuckCheck::IdleTurns as I;
        assert_eq!(fired, vec![None, Some((I, false)), None, Some((I, true))]);
    }

    #[test]
    fn a_slow_but_progressing_run_never_fires() {
        let mut guard = StuckGuard::new(Guard::default());
        // Waiting for a page: every other step changes the screen.
        for i in 0..100 {
            let wait = step(vec![Action::Wait { duration_ms: 1000 }]);
            assert!(guard.observe(&wait, Some(i % 4 == 0)).is_none(), "fired at {i}");
        }
    }

    #[test]
    fn off_means_off() {
        let mut guard = StuckGuard::new(Guard { no_change_steps: 0, repeat_actions: 0, idle_turns: 0, wait_steps: 0 });
        assert!(run(&mut guard, &vec![(idle(), false); 50]).iter().all(Option::is_none));
        assert!(run(&mut guard, &vec![(step(vec![click(1)]), false); 50]).iter().all(Option::is_none));
    }

    #[test]
    fn messages_say_what_is_repeated() {
        let mut guard = StuckGuard::new(Guard { no_change_steps: 0, repeat_actions: 2, idle_turns: 0, wait_steps: 0 });
        guard.observe(&step(vec![click(5)]), Some(false));
        let fired = guard.observe(&step(vec![click(5)]), Some(false)).unwrap();
        assert!(fired.note.message.contains("click(5,10)"), "{}", fired.note.message);
        assert!(fired.note.message.contains("repeated 2 times"), "{}", fired.note.message);
    }
}

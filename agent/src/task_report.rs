//! The message that tells the orchestrator how background tasks ended. The runtime writes it
//! (the orchestrator's next turn, or the first turn of a follow-up run); the `demo` model
//! recognizes it by its first line and repeats its task lines. Writer and reader both take the
//! format from here, so the demo provider does not depend on the orchestrator.

/// The report's first line.
pub const HEADER: &str = "[Background tasks finished]";
/// The report's last line.
const REQUEST: &str = "Report the outcome to the user.";
/// How each task's line starts.
const TASK_LINE: &str = "- ";

/// A report being written, one line per task.
#[derive(Debug, Clone)]
pub struct TaskReport {
    text: String,
}

impl TaskReport {
    pub fn new() -> Self {
        TaskReport {
            text: format!("{HEADER}\n"),
        }
    }

    /// A line saying how `task` ended: its result, or why it failed.
    pub fn task(&mut self, task: &str, outcome: Result<&str, &str>) {
        let (how, what) = match outcome {
            Ok(result) => ("done", result),
            Err(error) => ("failed", error),
        };
        self.text
            .push_str(&format!("{TASK_LINE}{task}: {how}: {what}\n"));
    }

    /// The report's text.
    pub fn finish(mut self) -> String {
        self.text.push_str(REQUEST);
        self.text
    }
}

impl Default for TaskReport {
    fn default() -> Self {
        Self::new()
    }
}

/// The task lines of a report, or `None` when `message` is not a report.
pub fn task_lines(message: &str) -> Option<Vec<&str>> {
    let rest = message.strip_prefix(HEADER)?;
    Some(rest.lines().filter(|l| l.starts_with(TASK_LINE)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_each_task_and_how_it_ended() {
        let mut report = TaskReport::new();
        report.task("task-1 (builder)", Ok("Created workflow `wf-1`."));
        report.task("task-2", Err("interrupted"));
        let text = report.finish();
        assert_eq!(
            text,
            "[Background tasks finished]\n\
             - task-1 (builder): done: Created workflow `wf-1`.\n\
             - task-2: failed: interrupted\n\
             Report the outcome to the user."
        );
        assert_eq!(
            task_lines(&text),
            Some(vec![
                "- task-1 (builder): done: Created workflow `wf-1`.",
                "- task-2: failed: interrupted",
            ])
        );
    }

    #[test]
    fn other_messages_are_not_reports() {
        assert_eq!(task_lines("Build a workflow in the background"), None);
        assert_eq!(task_lines(""), None);
    }
}

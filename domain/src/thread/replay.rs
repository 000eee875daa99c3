//! The command that stores a given thread event: how `verify` and `import` check a stored
//! event against the rules of the one append path ([`crate::aggregate::admit`]).

use super::*;

/// The command whose decision stores `e` in a thread.
pub(super) fn command_for(e: &AgentEvent) -> ThreadCommand {
    let by = e.user_id.clone().unwrap_or_default();
    match &e.body {
        EventBody::ThreadCreated(p) => match &p.fork_of {
            // Checked on the aggregate seeded with the fork's prefix.
            Some(fork_of) => ThreadCommand::Fork {
                owner: p.owner.clone(),
                title: p.title.clone(),
                fork_of: fork_of.clone(),
            },
            None => ThreadCommand::Create {
                owner: p.owner.clone(),
                title: p.title.clone(),
            },
        },
        EventBody::ThreadRenamed(p) => ThreadCommand::Rename {
            title: p.title.clone(),
            by,
        },
        EventBody::ThreadDeleted(_) => ThreadCommand::Delete { by },
        EventBody::UserMessage(p) => ThreadCommand::StartRun {
            run_id: e.run_id.clone(),
            agent_id: e.agent_id.clone(),
            message_id: p.message_id.clone(),
            message_group_id: None,
            text: p.text.clone(),
            user: by,
        },
        EventBody::ConfirmationAnswered(p) => ThreadCommand::AnswerConfirmation {
            request_id: p.request_id.clone(),
            approved: p.approved,
            user_input: p.user_input.clone(),
            answers: p.answers.clone(),
            by,
        },
        EventBody::CancelRequested(p) => ThreadCommand::Cancel {
            by,
            reason: p.reason.clone(),
        },
        EventBody::ChatForked(p) => ThreadCommand::MoveChat {
            thread_id: p.thread_id.clone(),
            by,
        },
        EventBody::TaskCancelRequested(p) => ThreadCommand::CancelTask {
            task_id: p.task_id.clone(),
            by,
        },
        EventBody::TaskCorrection(p) => ThreadCommand::CorrectTask {
            task_id: p.task_id.clone(),
            message: p.message.clone(),
            by,
        },
        EventBody::LlmUsage(u) => ThreadCommand::RecordUsage {
            run_id: e.run_id.clone(),
            agent_id: e.agent_id.clone(),
            usage: u.clone(),
        },
        EventBody::AguiEvent(a) => ThreadCommand::RecordAgui {
            run_id: e.run_id.clone(),
            agent_id: e.agent_id.clone(),
            event: a.clone(),
        },
        EventBody::ConversationSummary(p) => ThreadCommand::Summarize {
            run_id: e.run_id.clone(),
            agent_id: e.agent_id.clone(),
            summary: p.summary.clone(),
            covered_through_id: p.covered_through_id,
        },
        EventBody::ProducerWrite(p) => ThreadCommand::Produce(p.clone()),
        // Every n8n wire event (run-start included) is recorded as it is; an event of another
        // kind of stream is refused as internal.
        _ => ThreadCommand::Record(e.clone()),
    }
}

//! `ask-user`: a question (or several) only the user can answer; the answer is the result.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::event::{InputType, JsonObject, Question, Severity};

use super::{args, Tool, ToolCtx};
use crate::error::ToolFailure;

pub const ASK_USER: &str = "ask-user";

// Field doc comments are the descriptions the model reads.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AskUserArgs {
    /// a free-text question
    question: Option<String>,
    /// shown above the questions
    intro_message: Option<String>,
    questions: Option<Vec<Question>>,
}

/// Asks the user a question (`inputType: "text"`) or several structured ones
/// (`inputType: "questions"`); the answer is the call's result.
pub struct AskUser;

impl Tool for AskUser {
    fn name(&self) -> &str {
        ASK_USER
    }
    fn description(&self) -> &str {
        "Ask the user something only they know. Either one free-text `question`, or several \
         `questions` (each with an id, the question, a type single, multi or text, and options \
         for single and multi). Returns the user's answer."
    }
    fn parameters(&self) -> Value {
        args::schema::<AskUserArgs>()
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let AskUserArgs {
                question,
                intro_message: intro,
                questions,
            } = args::parse(&args)?;
            let questions = questions.filter(|q| !q.is_empty());
            let question = question
                .map(|q| q.trim().to_string())
                .filter(|q| !q.is_empty());
            let mut request = match (&questions, &question) {
                (Some(qs), _) => {
                    let message = question
                        .clone()
                        .or_else(|| intro.clone())
                        .unwrap_or_else(|| format!("{} questions for you", qs.len()));
                    let mut r = ctx.request(ASK_USER, &args, Severity::Info, message);
                    r.input_type = Some(InputType::Questions);
                    r.questions = questions.clone();
                    r
                }
                (None, Some(q)) => {
                    let mut r = ctx.request(ASK_USER, &args, Severity::Info, q.clone());
                    r.input_type = Some(InputType::Text);
                    r
                }
                (None, None) => {
                    return Err(ToolFailure::failed(
                        "give a 'question' or a list of 'questions'",
                    ))
                }
            };
            request.intro_message = intro;
            let answer = ctx.ask(request).await?;
            if !answer.approved {
                return Err(ToolFailure::failed("The user declined to answer"));
            }
            let mut result = json!({});
            if let Some(a) = answer.answers {
                result["answers"] = a;
            }
            if let Some(t) = answer.user_input {
                result["answer"] = Value::String(t);
            }
            Ok(result)
        })
    }
}

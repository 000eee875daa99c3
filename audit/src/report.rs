//! Analytics reports over the analytics read model ([`RunAnalytics`] documents): the runs a
//! [`RunFilter`] selects as JSON or CSV, and their [`Summary`]: runs per day (by status), tokens
//! per day by model, p50/p95 of duration and time to first token, tool calls and errors by
//! tool, confirmations, top threads by events, error rate — as text, or as the JSON the web
//! page's analytics charts draw (`threadstream analytics --format summary`, the same document
//! as `GET /instance-ai/analytics/summary`).

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::Serialize;
use serde_json::{json, Value};
use threadstream_projections::{iso_millis, ModelTokens, RunAnalytics};

/// Runs started in `[from, to)` in the given threads (each filter optional). A user's runs are
/// the runs of the threads they own (ingested runs carry no user of their own).
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub from: Option<i64>,
    pub to: Option<i64>,
    pub threads: Option<HashSet<String>>,
}

/// The selected runs, oldest first.
pub fn select(docs: impl IntoIterator<Item = RunAnalytics>, f: &RunFilter) -> Vec<RunAnalytics> {
    let mut runs: Vec<RunAnalytics> = docs
        .into_iter()
        .filter(|r| {
            f.from.is_none_or(|from| r.started_at >= from)
                && f.to.is_none_or(|to| r.started_at < to)
                && f.threads.as_ref().is_none_or(|t| t.contains(&r.thread_id))
        })
        .collect();
    runs.sort_by(|a, b| {
        (a.started_at, &a.thread_id, &a.run_id).cmp(&(b.started_at, &b.thread_id, &b.run_id))
    });
    runs
}

/// `{"runs": [...]}`, each run as its document (camelCase, epoch ms).
pub fn to_json(runs: &[RunAnalytics]) -> Value {
    json!({ "runs": runs })
}

const CSV_HEADER: &str = "threadId,runId,user,startedAt,finishedAt,durationMs,status,reason,toolCalls,toolCallsByTool,toolErrors,confirmationsAsked,confirmationsApproved,confirmationsDenied,subAgents,textChars,reasoningChars,inputTokens,outputTokens\n";

fn csv_field(out: &mut String, v: &str) {
    if v.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&v.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(v);
    }
}

/// RFC 4180 CSV with a header row; times as ISO 8601, tools as `name=count;…`.
pub fn to_csv(runs: &[RunAnalytics]) -> String {
    let mut out = String::from(CSV_HEADER);
    let opt = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
    let optu = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_default();
    for r in runs {
        let by_tool: Vec<String> = r
            .tool_calls
            .iter()
            .map(|(t, n)| format!("{t}={n}"))
            .collect();
        let fields = [
            r.thread_id.clone(),
            r.run_id.clone(),
            r.user.clone().unwrap_or_default(),
            iso_millis(r.started_at),
            r.finished_at.map(iso_millis).unwrap_or_default(),
            opt(r.duration_ms),
            r.status.clone(),
            r.reason.clone().unwrap_or_default(),
            r.tool_call_count().to_string(),
            by_tool.join(";"),
            r.tool_errors.to_string(),
            r.confirmations_asked.to_string(),
            r.confirmations_approved.to_string(),
            r.confirmations_denied.to_string(),
            r.sub_agents.to_string(),
            r.text_chars.to_string(),
            r.reasoning_chars.to_string(),
            optu(r.input_tokens),
            optu(r.output_tokens),
        ];
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            csv_field(&mut out, f);
        }
        out.push('\n');
    }
    out
}

/// One tool's calls and errors.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ToolFigures {
    pub tool: String,
    pub calls: u64,
    pub errors: u64,
}

/// Confirmations asked, and how they ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmationFigures {
    pub asked: u64,
    pub approved: u64,
    pub denied: u64,
    /// Unanswered when the run ended on the confirmation timeout.
    pub timed_out: u64,
}

/// A thread's events and runs among the selected runs.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadFigures {
    pub thread_id: String,
    pub events: u64,
    pub runs: u64,
}

/// How many threads [`Summary::top_threads`] lists.
pub const TOP_THREADS: usize = 10;

/// The summary of `threadstream analytics` (text, or JSON with `--format summary`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub runs: u64,
    /// Runs per status (`completed`, `cancelled`, `error`, `live`).
    pub by_status: BTreeMap<String, u64>,
    /// Runs per UTC day (`YYYY-MM-DD`).
    pub per_day: BTreeMap<String, u64>,
    /// Nearest-rank percentiles of finished runs' durations.
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
    /// Runs per UTC day and status.
    pub runs_per_day_by_status: BTreeMap<String, BTreeMap<String, u64>>,
    /// Tokens per UTC day (of the run's start) and model.
    #[schema(value_type = Object)]
    pub tokens_per_day_by_model: BTreeMap<String, BTreeMap<String, ModelTokens>>,
    /// Nearest-rank percentiles of the time from a run's start to its first text or reasoning.
    pub ttft_p50_ms: Option<i64>,
    pub ttft_p95_ms: Option<i64>,
    /// Tools by calls, most called first (ties by name), at most ten.
    /// Pairs `[tool, calls]`.
    #[schema(value_type = Vec<Vec<Value>>)]
    pub top_tools: Vec<(String, u64)>,
    /// Every tool, in the order of `top_tools`, with its errors.
    pub tools: Vec<ToolFigures>,
    pub confirmations: ConfirmationFigures,
    /// The threads with the most events in the selected runs (ties by id), at most ten.
    pub top_threads: Vec<ThreadFigures>,
    /// Finished runs that ended in `error`, over finished runs.
    pub error_rate: Option<f64>,
    pub tool_calls: u64,
    pub tool_errors: u64,
}

fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

pub fn summarize(runs: &[RunAnalytics]) -> Summary {
    let mut by_status = BTreeMap::new();
    let mut per_day = BTreeMap::new();
    let mut runs_per_day_by_status: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut tokens_per_day_by_model: BTreeMap<String, BTreeMap<String, ModelTokens>> =
        BTreeMap::new();
    let mut tools: BTreeMap<String, u64> = BTreeMap::new();
    let mut tool_errors_by_tool: BTreeMap<String, u64> = BTreeMap::new();
    let mut threads: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut confirmations = ConfirmationFigures::default();
    let (mut durations, mut ttfts) = (Vec::new(), Vec::new());
    let (mut tool_errors, mut errors) = (0, 0u64);
    for r in runs {
        let day = iso_millis(r.started_at)[..10].to_string();
        *by_status.entry(r.status.clone()).or_insert(0) += 1;
        *per_day.entry(day.clone()).or_insert(0) += 1;
        *runs_per_day_by_status
            .entry(day.clone())
            .or_default()
            .entry(r.status.clone())
            .or_insert(0) += 1;
        for (model, t) in &r.tokens_by_model {
            let sum = tokens_per_day_by_model
                .entry(day.clone())
                .or_default()
                .entry(model.clone())
                .or_default();
            sum.input_tokens += t.input_tokens;
            sum.output_tokens += t.output_tokens;
        }
        for (t, n) in &r.tool_calls {
            *tools.entry(t.clone()).or_insert(0) += n;
        }
        for (t, n) in &r.tool_errors_by_tool {
            *tool_errors_by_tool.entry(t.clone()).or_insert(0) += n;
        }
        let thread = threads.entry(r.thread_id.clone()).or_default();
        thread.0 += r.events;
        thread.1 += 1;
        confirmations.asked += r.confirmations_asked;
        confirmations.approved += r.confirmations_approved;
        confirmations.denied += r.confirmations_denied;
        confirmations.timed_out += r.confirmations_timed_out;
        tool_errors += r.tool_errors;
        durations.extend(r.duration_ms);
        ttfts.extend(r.first_token_ms);
        errors += u64::from(r.status == "error");
    }
    durations.sort_unstable();
    ttfts.sort_unstable();
    // Tools that only failed (an error whose call was never seen) still get a row.
    for t in tool_errors_by_tool.keys() {
        tools.entry(t.clone()).or_insert(0);
    }
    let mut top_tools: Vec<(String, u64)> = tools.into_iter().collect();
    top_tools.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let tool_calls = top_tools.iter().map(|t| t.1).sum();
    let tool_figures = top_tools
        .iter()
        .map(|(tool, calls)| ToolFigures {
            tool: tool.clone(),
            calls: *calls,
            errors: tool_errors_by_tool.get(tool).copied().unwrap_or(0),
        })
        .collect();
    top_tools.retain(|t| t.1 > 0);
    top_tools.truncate(10);
    let mut top_threads: Vec<ThreadFigures> = threads
        .into_iter()
        .map(|(thread_id, (events, runs))| ThreadFigures {
            thread_id,
            events,
            runs,
        })
        .collect();
    top_threads.sort_by(|a, b| {
        b.events
            .cmp(&a.events)
            .then_with(|| a.thread_id.cmp(&b.thread_id))
    });
    top_threads.truncate(TOP_THREADS);
    Summary {
        runs: runs.len() as u64,
        by_status,
        per_day,
        p50_ms: percentile(&durations, 50.0),
        p95_ms: percentile(&durations, 95.0),
        runs_per_day_by_status,
        tokens_per_day_by_model,
        ttft_p50_ms: percentile(&ttfts, 50.0),
        ttft_p95_ms: percentile(&ttfts, 95.0),
        top_tools,
        tools: tool_figures,
        confirmations,
        top_threads,
        error_rate: (!durations.is_empty()).then(|| errors as f64 / durations.len() as f64),
        tool_calls,
        tool_errors,
    }
}

/// The summary as JSON (`threadstream analytics --format summary`).
pub fn summary_json(runs: &[RunAnalytics]) -> Value {
    serde_json::to_value(summarize(runs)).expect("the summary serializes")
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let statuses: Vec<String> = self
            .by_status
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        writeln!(f, "runs: {} ({})", self.runs, statuses.join(", "))?;
        let ms = |v: Option<i64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
        writeln!(
            f,
            "duration: p50 {}, p95 {}",
            ms(self.p50_ms),
            ms(self.p95_ms)
        )?;
        match self.error_rate {
            Some(r) => writeln!(f, "error rate: {:.1}% of finished runs", r * 100.0)?,
            None => writeln!(f, "error rate: - (no finished runs)")?,
        }
        writeln!(
            f,
            "time to first token: p50 {}, p95 {}",
            ms(self.ttft_p50_ms),
            ms(self.ttft_p95_ms)
        )?;
        writeln!(
            f,
            "tool calls: {}, tool errors: {}",
            self.tool_calls, self.tool_errors
        )?;
        let c = &self.confirmations;
        writeln!(
            f,
            "confirmations: {} asked, {} approved, {} denied, {} timed out",
            c.asked, c.approved, c.denied, c.timed_out
        )?;
        writeln!(f, "runs per day:")?;
        for (day, n) in &self.per_day {
            writeln!(f, "  {day}  {n}")?;
        }
        writeln!(f, "top tools:")?;
        for (tool, n) in &self.top_tools {
            writeln!(f, "  {tool}  {n}")?;
        }
        writeln!(f, "tokens per day by model:")?;
        for (day, models) in &self.tokens_per_day_by_model {
            for (model, t) in models {
                writeln!(
                    f,
                    "  {day}  {model}  {} in, {} out",
                    t.input_tokens, t.output_tokens
                )?;
            }
        }
        writeln!(f, "top threads by events:")?;
        for t in &self.top_threads {
            writeln!(f, "  {}  {} events, {} runs", t.thread_id, t.events, t.runs)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        id: &str,
        start: i64,
        dur: Option<i64>,
        status: &str,
        tools: &[(&str, u64)],
    ) -> RunAnalytics {
        RunAnalytics {
            thread_id: if id == "r4" { "t2" } else { "t,1" }.into(),
            run_id: id.into(),
            user: Some("u".into()),
            started_at: start,
            finished_at: dur.map(|d| start + d),
            duration_ms: dur,
            status: status.into(),
            tool_calls: tools.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
            ..RunAnalytics::default()
        }
    }

    #[test]
    fn filter_summary_and_csv() {
        let day = 86_400_000;
        let runs = vec![
            run("r2", day + 5, Some(300), "error", &[("b", 1)]),
            run("r1", 10, Some(100), "completed", &[("a", 2), ("b", 1)]),
            run("r3", day + 9, None, "live", &[]),
            run("r4", 2 * day, Some(50), "completed", &[("a", 1)]),
        ];
        let all = select(runs.clone(), &RunFilter::default());
        assert_eq!(
            all.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
            ["r1", "r2", "r3", "r4"]
        );
        let f = RunFilter {
            from: Some(day),
            to: Some(2 * day),
            threads: Some(HashSet::from(["t,1".to_string()])),
        };
        let some = select(runs.clone(), &f);
        assert_eq!(
            some.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
            ["r2", "r3"]
        );

        let s = summarize(&all);
        assert_eq!(s.runs, 4);
        assert_eq!(s.per_day["1970-01-02"], 2);
        assert_eq!((s.p50_ms, s.p95_ms), (Some(100), Some(300)));
        assert_eq!(s.top_tools[0], ("a".to_string(), 3));
        assert_eq!(s.error_rate, Some(1.0 / 3.0));
        let text = s.to_string();
        assert!(
            text.contains("p50 100 ms, p95 300 ms") && text.contains("33.3%"),
            "{text}"
        );

        let csv = to_csv(&some);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[1].starts_with("\"t,1\",r2,u,1970-01-02T00:00:00.005Z,"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains(",300,error,,1,b=1,0,"), "{}", lines[1]);
    }

    #[test]
    fn summary_figures_for_the_charts() {
        let day = 86_400_000;
        let mut a = run("r1", 10, Some(100), "completed", &[("a", 2), ("b", 1)]);
        a.events = 40;
        a.first_token_ms = Some(30);
        a.tool_errors_by_tool = [("b".to_string(), 1)].into();
        a.tokens_by_model = [(
            "m1".to_string(),
            ModelTokens {
                input_tokens: 10,
                output_tokens: 2,
            },
        )]
        .into();
        a.confirmations_asked = 2;
        a.confirmations_approved = 1;
        a.confirmations_denied = 1;
        let mut b = run("r2", 20, Some(300), "error", &[("a", 1)]);
        b.events = 5;
        b.first_token_ms = Some(90);
        b.tokens_by_model = [(
            "m1".to_string(),
            ModelTokens {
                input_tokens: 1,
                output_tokens: 1,
            },
        )]
        .into();
        let mut c = run("r4", 2 * day, None, "cancelled", &[]);
        c.events = 50;
        c.confirmations_asked = 1;
        c.confirmations_timed_out = 1;
        c.tool_errors_by_tool = [("only-failed".to_string(), 1)].into();
        let s = summarize(&[a, b, c]);
        assert_eq!(s.runs_per_day_by_status["1970-01-01"]["completed"], 1);
        assert_eq!(s.runs_per_day_by_status["1970-01-01"]["error"], 1);
        assert_eq!(s.runs_per_day_by_status["1970-01-03"]["cancelled"], 1);
        assert_eq!(
            s.tokens_per_day_by_model["1970-01-01"]["m1"],
            ModelTokens {
                input_tokens: 11,
                output_tokens: 3
            }
        );
        assert_eq!((s.ttft_p50_ms, s.ttft_p95_ms), (Some(30), Some(90)));
        assert_eq!(
            s.tools,
            vec![
                ToolFigures {
                    tool: "a".into(),
                    calls: 3,
                    errors: 0
                },
                ToolFigures {
                    tool: "b".into(),
                    calls: 1,
                    errors: 1
                },
                ToolFigures {
                    tool: "only-failed".into(),
                    calls: 0,
                    errors: 1
                },
            ]
        );
        assert!(s.top_tools.iter().all(|t| t.1 > 0), "{:?}", s.top_tools);
        assert_eq!(
            s.confirmations,
            ConfirmationFigures {
                asked: 3,
                approved: 1,
                denied: 1,
                timed_out: 1
            }
        );
        // r1 and r2 share a thread ("t,1": 45 events), r4 is alone in "t2" (50).
        assert_eq!(
            s.top_threads,
            vec![
                ThreadFigures {
                    thread_id: "t2".into(),
                    events: 50,
                    runs: 1
                },
                ThreadFigures {
                    thread_id: "t,1".into(),
                    events: 45,
                    runs: 2
                },
            ]
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["confirmations"]["timedOut"], 1, "{v}");
        assert_eq!(
            v["tokensPerDayByModel"]["1970-01-01"]["m1"]["inputTokens"], 11,
            "{v}"
        );
        let text = s.to_string();
        assert!(
            text.contains("time to first token: p50 30 ms, p95 90 ms"),
            "{text}"
        );
        assert!(
            text.contains("confirmations: 3 asked, 1 approved, 1 denied, 1 timed out"),
            "{text}"
        );
    }
}

//! Compaction: the model summarises the history, the old conversation moves to `archive/`, and the
//! new history opens with the summary. One of the declared cache boundaries.
//!
//! The summary request reuses the same tools and system prompt and the history as stored, with the
//! instruction (`prompts/compact.md`) appended as a user message, so it reads the prefix cache;
//! it asks for text only (`tool_choice` none), and an answer with calls is not a summary.
//! Nothing is written until a usable summary exists: a failed compaction changes no file.
//!
//! What the person said survives by construction, not by the model's copying (issue 41): after
//! the summary the new history holds the person's own messages of the summarised part, verbatim
//! behind a label, newest first within a share of the context window ([`recall`]), so a rule,
//! a limit or a preference given in chat outlives any summary. A summary must be one: [`judge`]
//! refuses refusals, acknowledgements, tool calls and answers far too short for what they
//! replace; a refused answer is asked for once more with the reason, then the compaction fails
//! and nothing is archived.

use super::{Failure, Runtime, Surface};
use crate::event::{CompactTrigger, Event, Purpose};
use crate::message::{Message, Written};
use crate::store::files;
use crate::store::fsutil::stamp;

/// The instruction sent to the model to write the summary.
pub const INSTRUCTION: &str = include_str!("../../prompts/compact.md");

/// How the summary opens the new history.
const SUMMARY_HEADER: &str = "[This session was compacted. Summary of the work so far:]";

/// How each of the person's messages carried over a compaction opens (then its text, verbatim).
pub const RECALL_LABEL: &str = "[Earlier in this session the person said, verbatim:]";

/// The share of the context window the person's recalled messages may take (in bytes: tokens
/// × 4).
const RECALL_SHARE: f64 = 0.05;

impl Runtime {
    /// Compacts the history. `trigger` names the cause for the event. Messages from index `keep_from` on (the
    /// assistant message whose tool call asked for this, and its results so far) are kept after
    /// the summary, so the history stays valid: every tool call keeps its result.
    ///
    /// Returns false when there was nothing to summarise (no request was made, nothing changed).
    ///
    /// Errors (nothing changed): the provider failed, the summary was empty or a placeholder twice,
    /// the person interrupted, a file could not be written.
    pub fn compact(
        &mut self,
        trigger: CompactTrigger,
        keep_from: Option<usize>,
        ui: &mut dyn Surface,
    ) -> Result<bool, Failure> {
        self.hook_pre_compact(trigger, ui);
        let cut = keep_from
            .unwrap_or(self.prefix.history.len())
            .min(self.prefix.history.len());
        // What the summary is written from is the history in memory, which matched the file when
        // it was last read or written (`seen.disk`). If the file differs at the commit (another
        // process appended), the compaction is abandoned rather than dropping those messages.
        let read_as = self.seen.disk.map(|(_, conversation)| conversation);
        if cut == 0 {
            self.emit(
                ui,
                Event::Compaction {
                    trigger,
                    archived_messages: 0,
                    kept_messages: self.prefix.history.len(),
                    summary_bytes: None,
                    archive: None,
                    note: Some("nothing to summarise".into()),
                },
            );
            return Ok(false);
        }
        let summary = self.summarize(cut, ui)?;
        let kept = self.prefix.history[cut..].to_vec();
        let archived = cut;
        let budget = (self.cfg.context_window as f64 * 4.0 * RECALL_SHARE) as usize;
        let (recalled, dropped) = recall(&self.prefix.history[..cut], budget);
        let left_out = if dropped > 0 {
            format!(
                "\n\n[{dropped} older message(s) of the person are covered by the summary, not repeated below.]"
            )
        } else {
            String::new()
        };
        let mut new_history = vec![Message::note(format!(
            "{SUMMARY_HEADER}\n\n{summary}{left_out}"
        ))];
        new_history.extend(recalled);
        new_history.extend(kept);
        let archive = {
            let lock = self.session.lock()?;
            if Some(stamp(&self.session.path(files::CONVERSATION))) != read_as {
                return Err(Failure::Failed(
                    "compaction abandoned, nothing was changed: the conversation changed while the summary was written (another process added to it); try again".into(),
                ));
            }
            self.session
                .write_text_locked(&lock, files::SUMMARY, &format!("{summary}\n"))?;
            self.session
                .rewrite_conversation_locked(&lock, &new_history)?
        };
        self.prefix.history = new_history;
        self.note_disk();
        self.note_change(match trigger {
            CompactTrigger::PlanConfirm => crate::cost::miss::Cause::PlanConfirm,
            _ => crate::cost::miss::Cause::Compaction,
        });
        self.emit(
            ui,
            Event::Compaction {
                trigger,
                archived_messages: archived,
                kept_messages: self.prefix.history.len() - 1,
                summary_bytes: Some(summary.len()),
                archive: Some(archive),
                note: None,
            },
        );
        Ok(true)
    }

    /// Asks the model for a summary of `history[..cut]`; retries once when the answer is empty or
    /// a placeholder.
    fn summarize(&mut self, cut: usize, ui: &mut dyn Surface) -> Result<String, Failure> {
        let mut messages = self.prefix.history[..cut].to_vec();
        let material: usize = messages.iter().map(message_bytes).sum();
        messages.push(Message::user(INSTRUCTION.trim()));
        let mut last_problem = String::new();
        for attempt in 0..2 {
            if attempt == 1 {
                // Asked once more, told why the first answer was not taken.
                messages.pop();
                messages.push(Message::user(format!(
                    "{}\n\nYour previous answer was not taken: it was {last_problem}. Write the summary itself.",
                    INSTRUCTION.trim()
                )));
            }
            // Text only (`tool_choice` none): the tools stay in the body, so the summary
            // request still reads the cached prefix.
            let body_of = |rt: &Runtime| {
                rt.prefix
                    .body_with(&messages, &*rt.provider, &rt.options(None, false))
            };
            let body = body_of(self);
            self.within_budget(&body)?;
            let sent = match self.send(body, Purpose::Compaction, ui) {
                // The host's reasoning rule was wrong for this server: the other one, once.
                Err(e) if self.flip_reasoning_replay(&e, ui) => {
                    let body = body_of(self);
                    self.within_budget(&body)?;
                    self.send(body, Purpose::Compaction, ui)
                }
                other => other,
            };
            let answer = sent.map_err(|e| match super::request::provider_failure(e) {
                Failure::Interrupted => Failure::Interrupted,
                f => Failure::Failed(format!("compaction failed, nothing was changed: {f}")),
            })?;
            let text = answer.text.trim();
            if !answer.tool_calls.is_empty() {
                // An answer with calls is not a summary (nothing is run).
                last_problem = "tool calls instead of a summary".into();
                continue;
            }
            match judge(text, material) {
                Ok(()) => return Ok(text.to_string()),
                Err(why) => last_problem = why,
            }
            self.emit(
                ui,
                Event::warning(format!(
                    "the model's summary was not taken ({last_problem}){}",
                    if attempt == 0 {
                        "; asking once more"
                    } else {
                        ""
                    }
                )),
            );
        }
        Err(Failure::Failed(format!(
            "compaction failed, nothing was changed: the model returned {last_problem} twice"
        )))
    }
}

/// Bytes of a message's text (what a summary of it replaces).
fn message_bytes(m: &Message) -> usize {
    match m {
        Message::User { content, .. } | Message::Tool { content, .. } => content.len(),
        Message::Assistant {
            text, tool_calls, ..
        } => {
            text.len()
                + tool_calls
                    .iter()
                    .map(|c| c.arguments.to_string().len())
                    .sum::<usize>()
        }
    }
}

/// The person's messages of `history`, their text verbatim, as the compacted history carries
/// them (pure): each a user message opening with [`RECALL_LABEL`], chosen newest first while
/// their bytes fit `budget`, in the order they were said; and how many were left out. The
/// person's: prompts and steers (`by` None), and those recalled by an earlier compaction
/// (their text without the label); never what tern wrote (a summary, a note).
pub fn recall(history: &[Message], budget: usize) -> (Vec<Message>, usize) {
    let said: Vec<&str> = history
        .iter()
        .filter_map(|m| match m {
            Message::User {
                content, by: None, ..
            } => Some(content.as_str()),
            Message::User {
                content,
                by: Some(Written::Recalled),
                ..
            } => Some(
                content
                    .strip_prefix(RECALL_LABEL)
                    .map_or(content.as_str(), |t| t.strip_prefix('\n').unwrap_or(t)),
            ),
            _ => None,
        })
        .filter(|t| !t.trim().is_empty())
        .collect();
    let mut used = 0;
    let mut kept = Vec::new();
    for t in said.iter().rev() {
        let cost = t.len() + RECALL_LABEL.len() + 1;
        if used + cost > budget {
            break;
        }
        used += cost;
        kept.push(Message::User {
            content: format!("{RECALL_LABEL}\n{t}"),
            steer: None,
            by: Some(Written::Recalled),
        });
    }
    kept.reverse();
    let dropped = said.len() - kept.len();
    (kept, dropped)
}

/// Whether `text` is a summary of `material` bytes of history (pure). Errors: what it is
/// instead, for the retry's request and the failure: empty or a placeholder, a refusal, an
/// acknowledgement, a tool call written as text, or far too short for what it replaces.
pub fn judge(text: &str, material: usize) -> Result<(), String> {
    let t = text.trim();
    if is_placeholder(t) {
        return Err(if t.is_empty() {
            "an empty summary".into()
        } else {
            format!("a placeholder summary ({:?})", crate::text::cut(t, 80))
        });
    }
    let head = crate::text::cut(t, 200).to_lowercase();
    let head = head.trim_start_matches(|c: char| !c.is_alphanumeric());
    const REFUSALS: [&str; 9] = [
        "i'm sorry",
        "i am sorry",
        "sorry, i",
        "i can't",
        "i cannot",
        "i can not",
        "i'm unable",
        "i am unable",
        "as an ai",
    ];
    if REFUSALS.iter().any(|r| head.starts_with(r)) {
        return Err(format!("a refusal ({:?})", crate::text::cut(t, 80)));
    }
    const ACKS: [&str; 10] = [
        "sure",
        "okay",
        "ok,",
        "ok.",
        "certainly",
        "understood",
        "of course",
        "got it",
        "i will",
        "i'll",
    ];
    if t.len() < 400 && ACKS.iter().any(|a| head.starts_with(a)) {
        return Err(format!(
            "an acknowledgement, not a summary ({:?})",
            crate::text::cut(t, 80)
        ));
    }
    if super::textcall::unrun_call(t).is_some() {
        return Err("a tool call written as text instead of a summary".into());
    }
    // A summary may be short for a short session; for a long one, a few words replace nothing.
    let least = (material / 250).min(64);
    if t.len() < least {
        return Err(format!(
            "{} bytes for {material} bytes of history, far too short to replace it",
            t.len()
        ));
    }
    Ok(())
}

/// True for summaries that carry nothing: empty, very short, or a stock placeholder.
pub fn is_placeholder(text: &str) -> bool {
    let t = text
        .trim()
        .trim_matches(|c: char| c == '[' || c == ']' || c == '.' || c == '…');
    let lower = t.to_lowercase();
    t.chars().count() < 16
        || matches!(
            lower.as_str(),
            "summary"
                | "no summary"
                | "todo"
                | "n/a"
                | "none"
                | "placeholder"
                | "summary goes here"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_must_be_one() {
        let long = 50_000;
        let real = "The person asked for a parser of CSV files in src/csv.rs with tests; it was written, cargo test passed, the next step is the error messages. Rules given: never touch vendor/, keep the budget under $5, prefer small commits.";
        assert_eq!(judge(real, long), Ok(()));
        for bad in [
            "",
            "[summary]",
            "I'm sorry, but I can't assist with that request.",
            "Sorry, I cannot summarise this conversation as it contains private data.",
            "Sure, I will write the summary.",
            "Okay! Here is the summary you asked for.",
            "{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}",
            "The person wanted code. Done.",
        ] {
            assert!(judge(bad, long).is_err(), "{bad:?} was taken");
        }
        // A short session may have a short summary.
        assert_eq!(judge("The person said hi and was greeted.", 900), Ok(()));
        assert!(
            judge("I'm sorry, I can't.", 900)
                .unwrap_err()
                .contains("refusal")
        );
    }

    #[test]
    fn the_persons_words_are_recalled_verbatim_newest_first_within_the_budget() {
        let h = vec![
            Message::user("rule: never touch vendor/"),
            Message::note("[tern: a note]"),
            Message::user("limit: at most $5"),
            Message::tool(
                &crate::message::ToolCall {
                    id: "c".into(),
                    name: "bash".into(),
                    arguments: serde_json::json!({}),
                },
                "output",
                false,
            ),
            Message::user("prefer small commits"),
        ];
        let (all, dropped) = recall(&h, 10_000);
        assert_eq!(dropped, 0);
        let texts: Vec<String> = all
            .iter()
            .map(|m| match m {
                Message::User { content, .. } => content.clone(),
                _ => panic!("{m:?}"),
            })
            .collect();
        assert_eq!(
            texts,
            [
                format!("{RECALL_LABEL}\nrule: never touch vendor/"),
                format!("{RECALL_LABEL}\nlimit: at most $5"),
                format!("{RECALL_LABEL}\nprefer small commits"),
            ]
        );
        // Room for two: the oldest goes.
        let two =
            2 * (RECALL_LABEL.len() + 1) + "limit: at most $5".len() + "prefer small commits".len();
        let (some, dropped) = recall(&h, two);
        assert_eq!((some.len(), dropped), (2, 1));
        // A second round recalls the recalled, not the labels twice.
        let (again, _) = recall(&all, 10_000);
        assert_eq!(again, all);
    }

    #[test]
    fn placeholders() {
        assert!(is_placeholder(""));
        assert!(is_placeholder("  ...  "));
        assert!(is_placeholder("[summary]"));
        assert!(!is_placeholder(
            "The person asked for hello.txt; it was created and shown."
        ));
    }
}

//! Compaction: the model summarises the history, the old conversation moves to `archive/`, and the
//! new history opens with the summary. One of the declared cache boundaries.
//!
//! The summary request reuses the same tools and system prompt and the history as stored, with the
//! instruction (`prompts/compact.md`) appended as a user message, so it reads the prefix cache;
//! it asks for text only (`tool_choice` none), and an answer with calls is not a summary.
//! Nothing is written until a usable summary exists: a failed compaction changes no file.

use super::{Failure, Runtime, Surface};
use crate::event::{CompactTrigger, Event, Purpose};
use crate::message::Message;
use crate::store::files;
use crate::store::fsutil::stamp;

/// The instruction sent to the model to write the summary.
pub const INSTRUCTION: &str = include_str!("../../prompts/compact.md");

/// How the summary opens the new history.
const SUMMARY_HEADER: &str = "[This session was compacted. Summary of the work so far:]";

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

        let mut new_history = vec![Message::user(format!("{SUMMARY_HEADER}\n\n{summary}"))];
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
        messages.push(Message::user(INSTRUCTION.trim()));
        let mut last_problem = String::new();
        for _ in 0..2 {
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
            if !answer.tool_calls.is_empty() || super::textcall::unrun_call(text).is_some() {
                // An answer with calls is not a summary (nothing is run).
                last_problem = "tool calls instead of a summary".into();
                continue;
            }
            if !is_placeholder(text) {
                return Ok(text.to_string());
            }
            last_problem = if text.is_empty() {
                "an empty summary".into()
            } else {
                format!("a placeholder summary ({text:?})")
            };
        }
        Err(Failure::Failed(format!(
            "compaction failed, nothing was changed: the model returned {last_problem} twice"
        )))
    }
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
    use super::is_placeholder;

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

//! The nudge: a command written in a shell code block instead of a tool call (issue 23).
//!
//! Small local models often answer a task with prose and the command in a ```` ```sh ```` block,
//! and no tool call: the turn would end "completed" with nothing done. Running such a block is
//! not safe (a strong model's final answer may show an example command), but telling the model
//! once is: one short user message ([`MESSAGE`]) appended after its answer, so the cached prefix
//! is unchanged, and the model either calls bash or says it was an example.
//!
//! Only while the turn has made no tool call yet (after real work, a command in the final answer
//! is an example), at most once per turn, and never when bash cannot run (`--approval never`).
//! When the reply to the nudge again has no call, the turn ends as it would have: completed, with
//! the answer the nudge was about as its answer (`tern exec … | less` prints the answer the person
//! asked for, not the model's "that was an example").

use super::{Failure, Runtime, Surface};
use crate::event::Event;
use crate::message::Message;
use crate::policy::Approval;

/// The user message appended after an answer that shows a command it did not run
/// (`prompts/nudge.md`, one line, compiled in).
pub const MESSAGE: &str = include_str!("../../prompts/nudge.md");

/// The longest command an event reports, in bytes (cut at a character boundary).
const SHOWN_MAX: usize = 200;

/// The nudge's state over one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Nudge {
    /// May still nudge: no tool call and no nudge yet in this turn.
    Armed,
    /// Off for the rest of the turn: a tool call was made, or `--no-nudge`.
    Off,
    /// Nudged once; holds the answer the nudge was about.
    Sent(String),
}

impl Nudge {
    /// A turn's nudge: armed when `enabled` (`--no-nudge` not given, and bash may run).
    pub(super) fn new(enabled: bool) -> Nudge {
        if enabled { Nudge::Armed } else { Nudge::Off }
    }

    /// The turn made a tool call: from now on a command shown in an answer is an example.
    pub(super) fn called(&mut self) {
        *self = Nudge::Off;
    }

    /// For an answer with no tool call: the command it shows, when the model is to be told it
    /// did not run (armed, and [`shown_command`] finds one). Disarms the nudge.
    pub(super) fn wanted(&mut self, answer: &str) -> Option<String> {
        if *self != Nudge::Armed {
            return None;
        }
        let command = shown_command(answer)?;
        *self = Nudge::Sent(answer.to_string());
        Some(command)
    }

    /// The turn's answer when it ends on `last` (an answer with no tool call): after a nudge
    /// that got no call, the answer the nudge was about; else `last`.
    pub(super) fn final_text(self, last: String) -> String {
        match self {
            Nudge::Sent(answer) => answer,
            _ => last,
        }
    }
}

impl Runtime {
    /// The nudge of a new turn: armed unless `--no-nudge`, or bash cannot run (not advertised,
    /// or `--approval never`, where showing commands instead of running them is the point).
    pub(super) fn nudge_for_turn(&self) -> Nudge {
        let bash = self.prefix.tools.iter().any(|t| t.name == "bash");
        Nudge::new(self.cfg.nudge && bash && self.cfg.approval != Approval::Never)
    }

    /// For a stored answer `text` with no tool call: when `nudge` wants it, stores [`MESSAGE`]
    /// as a user message after the answer (the history stays append-only), emits `nudge`, and
    /// returns true (the turn goes on). Errors: the store's.
    pub(super) fn nudge_if_shown(
        &mut self,
        nudge: &mut Nudge,
        text: &str,
        ui: &mut dyn Surface,
    ) -> Result<bool, Failure> {
        let Some(command) = nudge.wanted(text) else {
            return Ok(false);
        };
        self.store(vec![Message::note(MESSAGE.trim_end())])?;
        self.emit(ui, Event::Nudge { command });
        Ok(true)
    }
}

/// The first command `text` shows as one to run: the first line of a ```` ```sh ````,
/// ```` ```bash ```` or ```` ```shell ```` block that is not blank or a comment (a leading `$ `
/// removed), or a line starting with `$ ` anywhere; only when it looks like a command (see
/// `looks_like_command`). Cut to 200 bytes. None for anything else (prose, other blocks).
pub fn shown_command(text: &str) -> Option<String> {
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if let Some(info) = t.strip_prefix("```") {
            let lang = info.split_whitespace().next().unwrap_or("");
            let shell = ["sh", "bash", "shell"]
                .iter()
                .any(|l| lang.eq_ignore_ascii_case(l));
            let mut first = None;
            for l in lines.by_ref() {
                let l = l.trim();
                if l.starts_with("```") {
                    break;
                }
                if first.is_none() {
                    let c = l.strip_prefix("$ ").unwrap_or(l).trim();
                    let prompt_line = l.starts_with("$ ");
                    if (shell || prompt_line) && !c.is_empty() && !c.starts_with('#') {
                        first = Some(c.to_string());
                    }
                }
            }
            if let Some(c) = first.filter(|c| looks_like_command(c)) {
                return Some(cut(c));
            }
            continue;
        }
        if let Some(c) = t.strip_prefix("$ ").map(str::trim)
            && looks_like_command(c)
        {
            return Some(cut(c.to_string()));
        }
    }
    None
}

/// A line that reads as a shell command: its first word is a plausible program name or
/// assignment (letters, digits and `_./~+-=:`, not starting with `-`, at most 64 bytes), and the
/// line does not end like a sentence or a heading (`.` after several words, or `:`).
fn looks_like_command(line: &str) -> bool {
    let line = line.trim();
    let Some(word) = line.split_whitespace().next() else {
        return false;
    };
    let word_ok = word.len() <= 64
        && !word.starts_with('-')
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./~+-=:".contains(c));
    word_ok && !line.ends_with(':') && !(line.ends_with('.') && line.contains(' '))
}

fn cut(mut s: String) -> String {
    if s.len() > SHOWN_MAX {
        let mut at = SHOWN_MAX;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_blocks_and_prompt_lines_are_commands() {
        let a = "To find it, run:\n\n```bash\nfind . -name '*.txt'\n```\n\nThis lists them.";
        assert_eq!(shown_command(a).as_deref(), Some("find . -name '*.txt'"));
        let b = "```sh\n# make it executable\nchmod +x hello.sh\n```";
        assert_eq!(shown_command(b).as_deref(), Some("chmod +x hello.sh"));
        assert_eq!(
            shown_command("```Shell\n$ wc -l data.txt\n```").as_deref(),
            Some("wc -l data.txt")
        );
        assert_eq!(
            shown_command("Run this:\n$ ls -la\nand look.").as_deref(),
            Some("ls -la")
        );
        assert_eq!(
            shown_command("```\n$ echo 37 > count.txt\n```").as_deref(),
            Some("echo 37 > count.txt"),
            "a prompt line in a block without a language"
        );
    }

    /// First answers of the 1.5B model at temperature 0.8 (evals/results/nudge-before-t08.json)
    /// that ended the turn with nothing done.
    #[test]
    fn the_small_models_answers_are_commands() {
        let steps =
            "5. Make the script executable by running:\n   ```bash\n   chmod +x hello.sh\n   ```";
        assert_eq!(shown_command(steps).as_deref(), Some("chmod +x hello.sh"));
        let script = "Here is the sequence:\n\n```bash\n# Step 1: Create the backup folder\nif [ ! -d backup ]; then\n  mkdir backup\nfi\n```";
        assert_eq!(
            shown_command(script).as_deref(),
            Some("if [ ! -d backup ]; then")
        );
    }

    #[test]
    fn prose_and_other_blocks_are_not() {
        assert!(shown_command("Done: the file says hi.").is_none());
        assert!(shown_command("```python\nprint('hi')\n```").is_none());
        assert!(
            shown_command("```\nls -la\n```").is_none(),
            "no language, no $"
        );
        assert!(shown_command("```sh\n# only a comment\n```").is_none());
        assert!(shown_command("```bash\n```").is_none());
        assert!(shown_command("```sh\n-rw-r--r-- 1 root root 0 a\n```").is_none());
        assert!(shown_command("It costs\n$ 5 or more.").is_none());
        assert!(shown_command("```sh\nThis is what you do next.\n```").is_none());
    }

    #[test]
    fn a_long_command_is_cut_at_a_character() {
        let long = format!("```sh\necho {}\n```", "é".repeat(300));
        let c = shown_command(&long).unwrap();
        assert!(c.len() <= SHOWN_MAX + '…'.len_utf8() && c.ends_with('…'));
    }

    #[test]
    fn once_per_turn_and_never_after_a_call() {
        let shown = "```sh\nls\n```";
        let mut n = Nudge::new(true);
        assert_eq!(n.wanted(shown).as_deref(), Some("ls"));
        assert_eq!(n.wanted(shown), None, "once per turn");
        assert_eq!(n.final_text("an example".into()), shown);

        let mut n = Nudge::new(true);
        n.called();
        assert_eq!(n.wanted(shown), None, "after real work it is an example");
        assert_eq!(n.final_text("last".into()), "last");

        assert_eq!(Nudge::new(false).wanted(shown), None, "--no-nudge");
    }
}

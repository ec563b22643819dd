//! Section 14: what a compaction keeps (issue 41): the person's messages recalled verbatim
//! after the summary, in bytes, beside what the summary alone kept before.

use super::*;

/// A session where the person said `n` things (one answer each), then `tern compact` with a
/// fixed summary, then one more request: (conversation bytes after the compaction, bytes of its
/// summary message, bytes of the first request after it, rules found in that request).
fn compacted(n: usize) -> R<(usize, usize, usize, usize)> {
    let summary = "Summary: the person set rules and limits over the session; the work is as the files show, and the next step is to continue.";
    let mut script: Vec<Reply> = (0..n)
        .map(|i| support::openai_text(&format!("noted {i}")).auto_usage())
        .collect();
    script.push(support::openai_text(summary).auto_usage());
    script.push(final_answer());
    let server = FakeServer::start(script);
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    for i in 0..n {
        let said =
            format!("Rule {i}: keep file-{i}.txt read-only, and never push to branch b-{i}.");
        let mut args = vec!["exec".to_string()];
        if i > 0 {
            args.push("--continue".into());
        }
        args.push(said);
        let status = tern_command(&server, tmp.path(), TERN, &args)?
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("turn {i} failed"));
        }
    }
    let run = |args: &[&str]| -> R<()> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let status = tern_command(&server, tmp.path(), TERN, &args)?
            .status()
            .map_err(|e| e.to_string())?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{args:?} failed"))
        }
    };
    run(&["compact"])?;
    let sessions = tmp.path().join("ws/.tern/sessions");
    let dir = fs::read_dir(&sessions)
        .map_err(|e| e.to_string())?
        .flatten()
        .next()
        .ok_or("no session")?
        .path();
    let conv = fs::read_to_string(dir.join("conversation.jsonl")).map_err(|e| e.to_string())?;
    let first = conv.lines().next().unwrap_or("").len() + 1;
    run(&["exec", "--continue", "go on"])?;
    let last = server
        .requests()
        .last()
        .map(|r| r.body.clone())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&last);
    let rules = (0..n)
        .filter(|i| text.contains(&format!("Rule {i}: keep")))
        .count();
    Ok((conv.len(), first, last.len(), rules))
}

pub(super) fn bench_compaction() -> R<String> {
    let mut md = String::from("## 14. What a compaction keeps\n\n");
    md.push_str(
        "A session where the person gave one rule per turn (`Rule i: keep file-i.txt read-only, \
         and never push to branch b-i.`, 71–73 bytes), then `tern compact` with a fixed summary \
         that names none of them, then one more request. The build before issue 41 kept the \
         summary alone (the middle column); this one keeps the person's messages after it, \
         each behind its label, within 5 % of the context window (128k tokens: 25,600 bytes).\n\n",
    );
    md.push_str("| person's messages | kept: summary alone (before) | kept now (conversation.jsonl) | rules in the next request | first request after, bytes |\n|---|---|---|---|---|\n");
    for n in [5, 20, 100, 400] {
        let (kept, summary, after, rules) = compacted(n)?;
        md.push_str(&format!(
            "| {n} | {summary} B | {kept} B | {rules} of {n} | {after} |\n"
        ));
    }
    md.push('\n');
    Ok(md)
}

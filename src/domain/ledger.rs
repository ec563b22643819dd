//! The To-do ledger: the one progress ledger of a session (`ledger.json`), the replacement rules
//! of `work_update` and its hidden legacy aliases (DESIGN.md §6).
//!
//! Pure: [`apply`] takes the current ledger and a call's arguments and returns the next ledger, or
//! the error text with nothing changed; the store writes `ledger.json`, `tools::work` advertises the
//! tool, the runtime wires it into the turn loop.

use super::DomainError;
use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// At most this many items in one ledger; a longer list is rejected, never cut.
pub const MAX_ITEMS: usize = 100;
/// At most this many characters (Unicode scalar values) of content per item, after trimming.
pub const MAX_CONTENT_CHARS: usize = 500;
/// At most this many characters per item id.
pub const MAX_ID_CHARS: usize = 32;

/// The one advertised progress tool.
pub const WORK_UPDATE: &str = "work_update";
/// The strategy tool: conversation only, never a progress list.
pub const UPDATE_PLAN: &str = "update_plan";
/// Hidden legacy names: dispatched by [`apply`] against the same ledger so old transcripts
/// replay, never advertised to the model.
pub const LEGACY_ALIASES: [&str; 6] = [
    "todo_write",
    "TodoWrite",
    "checklist_write",
    "checklist_add",
    "checklist_update",
    "todo_list",
];

/// Problem lines beyond this are summarised, so an error tool result stays small.
const MAX_PROBLEM_LINES: usize = 20;
/// Characters of item content quoted when an error names an item.
const SNIPPET_CHARS: usize = 40;

/// The To-do ledger as stored in `ledger.json`:
/// `{"goal": {…} | null, "items": [{"id", "content", "status"}], "revision": 3}`.
/// Missing fields read as empty, so a hand-written `{}` is an empty ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// What the whole job is for; kept across updates that do not send one.
    #[serde(default)]
    pub goal: Option<Goal>,
    /// The items in the order the model sent them.
    #[serde(default)]
    pub items: Vec<Item>,
    /// Counts successful writes: each accepted update is the previous revision + 1.
    #[serde(default)]
    pub revision: u64,
}

impl Ledger {
    /// How many items are settled (completed or cancelled).
    pub fn settled(&self) -> usize {
        self.items.iter().filter(|i| i.status.is_settled()).count()
    }

    /// The first item in progress and its index (a valid ledger has at most one).
    pub fn in_progress(&self) -> Option<(usize, &Item)> {
        self.items
            .iter()
            .enumerate()
            .find(|(_, i)| i.status == Status::InProgress)
    }
}

/// The job's goal: `{"objective": "…", "token_budget": 200000 | null, "started_at": 1767225600 | null}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goal {
    /// What the job should achieve, one line.
    pub objective: String,
    /// Tokens the job may spend (the sidebar's budget bar); `None` = no budget.
    #[serde(default)]
    pub token_budget: Option<u64>,
    /// Unix seconds when this objective was first set; kept while the same objective is re-sent.
    #[serde(default)]
    pub started_at: Option<u64>,
}

/// One To-do item: `{"id": "3", "content": "Write the page", "status": "in_progress"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Unique within the ledger; non-empty, at most [`MAX_ID_CHARS`], no whitespace.
    pub id: String,
    /// What to do; non-empty, trimmed, at most [`MAX_CONTENT_CHARS`] characters.
    pub content: String,
    /// Where the item stands.
    pub status: Status,
}

/// An item's status, stored in snake_case: `pending`, `in_progress`, `completed`, `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Not started.
    Pending,
    /// Being worked on; at most one item at a time.
    InProgress,
    /// Done.
    Completed,
    /// Dropped on purpose; the only way an unfinished item may leave the list.
    Cancelled,
}

impl Status {
    /// The stored (and model-facing) name, e.g. `"in_progress"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Cancelled => "cancelled",
        }
    }

    /// Parses the exact stored name; anything else (other case, `done`, …) is `None`.
    pub fn parse(name: &str) -> Option<Status> {
        match name {
            "pending" => Some(Status::Pending),
            "in_progress" => Some(Status::InProgress),
            "completed" => Some(Status::Completed),
            "cancelled" => Some(Status::Cancelled),
            _ => None,
        }
    }

    /// Completed or cancelled: the item needs no more work and may leave the list.
    pub fn is_settled(self) -> bool {
        matches!(self, Status::Completed | Status::Cancelled)
    }
}

/// The result of an accepted To-do tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The ledger to store: revision + 1 for writes; `todo_list` returns the current ledger as is.
    pub ledger: Ledger,
    /// The short tool-result text the model reads.
    pub reply: String,
    /// An item moved into `in_progress`, or into `completed`/`cancelled` from an unsettled status
    /// (a new item counts as moving from nothing). The runtime uses it for the plan lifecycle's
    /// `executing` transition (DESIGN.md §5).
    pub started_or_finished: bool,
}

/// Runs one To-do tool call against `current`; all or nothing.
///
/// - `work_update`, `todo_write`, `TodoWrite`, `checklist_write`: full replacement with
///   `{todos: [{id?, content, status}], goal?}` (the aliases also take the list as `items`).
///   Ids are trimmed; a number id is taken as its decimal string; absent (or null) ids get, in
///   list order, the lowest positive integers not given explicitly in the same list, so an
///   all-absent list is numbered 1..n. `todos` may also arrive as a string holding a JSON array.
/// - `checklist_add {content, status?, id?}`: appends one item (status defaults to pending; id
///   defaults to the largest numeric id + 1).
/// - `checklist_update {id, status?, content?}`: changes one item.
/// - `goal` (`{objective, token_budget?}`, or just the objective string) replaces the goal when
///   given; `started_at` = `now_unix` (Unix seconds) for a new objective and is kept when the same
///   objective is re-sent. Absent or null keeps the current goal.
///
/// `draft_pending`: an unconfirmed plan draft exists; then an update that would start or finish
/// an item is refused (DESIGN.md §5, wrong order), while adding or editing pending items is not.
///
/// Errors (the tool-result text; the ledger is unchanged) name the offending items and list every
/// problem found at once: arguments not an object, `todos` not an array, an item not an object,
/// empty/duplicate/over-long/whitespace ids, missing or unknown status, missing, empty or
/// over-long content, more than [`MAX_ITEMS`] items, more than one item in progress, unfinished
/// items of `current` left out without being `cancelled`, a bad goal; then the wrong-order refusal.
pub fn apply(
    current: &Ledger,
    tool: &str,
    args: &Value,
    draft_pending: bool,
    now_unix: u64,
) -> Result<Applied, DomainError> {
    let empty = Map::new();
    let obj = match args {
        Value::Object(m) => m,
        // Some providers send no-argument calls as null.
        Value::Null => &empty,
        other => {
            return Err(DomainError::Invalid(format!(
                "{tool}: the arguments must be a JSON object, got {}.",
                super::json_kind(other)
            )));
        }
    };
    let cx = Cx {
        current,
        tool,
        draft_pending,
        now_unix,
    };
    match tool {
        WORK_UPDATE => {
            let list = obj.get("todos").ok_or_else(|| missing_todos(tool))?;
            cx.replace(list_of(tool, list)?, obj.get("goal"), None)
        }
        "todo_write" | "TodoWrite" | "checklist_write" => {
            let list = match (obj.get("todos"), obj.get("items")) {
                (Some(l), None) | (None, Some(l)) => l,
                (Some(_), Some(_)) => {
                    return Err(DomainError::Invalid(format!(
                        "{tool}: give todos or items, not both."
                    )));
                }
                (None, None) => return Err(DomainError::Invalid(missing_todos(tool))),
            };
            cx.replace(list_of(tool, list)?, obj.get("goal"), None)
        }
        "checklist_add" => cx.add(obj),
        "checklist_update" => cx.update_one(obj),
        _ => Err(DomainError::Invalid(format!("{tool} is not a To-do tool."))),
    }
}

fn missing_todos(tool: &str) -> String {
    format!("{tool}: todos is required: an array of {{id?, content, status}}.")
}

/// The item list as an array, also when the model sent the array JSON-encoded in a string.
fn list_of(tool: &str, list: &Value) -> Result<Vec<Value>, DomainError> {
    match list {
        Value::Array(a) => Ok(a.clone()),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Array(a)) => Ok(a),
            _ => Err(DomainError::Invalid(format!(
                "{tool}: todos must be an array of {{id?, content, status}}, got a string."
            ))),
        },
        other => Err(DomainError::Invalid(format!(
            "{tool}: todos must be an array of {{id?, content, status}}, got {}.",
            super::json_kind(other)
        ))),
    }
}

/// The fixed inputs of one call.
struct Cx<'a> {
    current: &'a Ledger,
    tool: &'a str,
    draft_pending: bool,
    now_unix: u64,
}

/// One item as sent, parsed as far as it goes.
struct Sent {
    /// 1-based position in the list, for error messages.
    pos: usize,
    id: SentId,
    content: Option<String>,
    status: Option<Status>,
}

enum SentId {
    Absent,
    Given(String),
    Invalid,
}

impl Sent {
    fn label(&self) -> String {
        let id = match &self.id {
            SentId::Given(id) => Some(id.as_str()),
            _ => None,
        };
        label(self.pos, id, self.content.as_deref())
    }
}

/// `item 2 (#1 "b")`: how errors name an item the model sent.
fn label(pos: usize, id: Option<&str>, content: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(id) = id {
        parts.push(format!("#{}", snippet(id)));
    }
    if let Some(c) = content {
        parts.push(format!("\"{}\"", snippet(c)));
    }
    if parts.is_empty() {
        format!("item {pos}")
    } else {
        format!("item {pos} ({})", parts.join(" "))
    }
}

/// `#4 "Write the page"`: how errors name an item of the current ledger.
fn stored_label(item: &Item) -> String {
    format!("#{} \"{}\"", snippet(&item.id), snippet(&item.content))
}

/// At most [`SNIPPET_CHARS`] characters, on one line.
fn snippet(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() > SNIPPET_CHARS {
        let cut: String = flat.chars().take(SNIPPET_CHARS - 1).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// A list of names, at most [`MAX_PROBLEM_LINES`] of them, then "and N more".
fn name_list(names: &[String]) -> String {
    let mut out = names
        .iter()
        .take(MAX_PROBLEM_LINES)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > MAX_PROBLEM_LINES {
        out.push_str(&format!(" and {} more", names.len() - MAX_PROBLEM_LINES));
    }
    out
}

fn parse_item(pos: usize, v: &Value, problems: &mut Vec<String>) -> Sent {
    let Value::Object(m) = v else {
        problems.push(format!(
            "item {pos}: must be an object {{id?, content, status}}, got {}",
            super::json_kind(v)
        ));
        return Sent {
            pos,
            id: SentId::Invalid,
            content: None,
            status: None,
        };
    };
    let mut mine = Vec::new();
    let content = match m.get("content") {
        Some(Value::String(s)) => {
            let t = s.trim();
            let n = t.chars().count();
            if t.is_empty() {
                mine.push("empty content".to_string());
            } else if n > MAX_CONTENT_CHARS {
                mine.push(format!(
                    "content is {n} characters, at most {MAX_CONTENT_CHARS}"
                ));
            }
            (!t.is_empty()).then(|| t.to_string())
        }
        None | Some(Value::Null) => {
            mine.push("missing content".into());
            None
        }
        Some(other) => {
            mine.push(format!(
                "content must be a string, got {}",
                super::json_kind(other)
            ));
            None
        }
    };
    let status = match m.get("status") {
        Some(Value::String(s)) => {
            let st = Status::parse(s);
            if st.is_none() {
                mine.push(format!(
                    "unknown status \"{}\" (use pending, in_progress, completed or cancelled)",
                    snippet(s)
                ));
            }
            st
        }
        None | Some(Value::Null) => {
            mine.push("missing status (pending, in_progress, completed or cancelled)".into());
            None
        }
        Some(other) => {
            mine.push(format!(
                "status must be a string, got {}",
                super::json_kind(other)
            ));
            None
        }
    };
    let id = match m.get("id") {
        None | Some(Value::Null) => SentId::Absent,
        Some(Value::Number(n)) if n.as_u64().is_some() => SentId::Given(n.to_string()),
        Some(Value::String(s)) => {
            let t = s.trim();
            if t.is_empty() {
                mine.push("empty id (omit id to have one assigned)".into());
                SentId::Invalid
            } else if t.chars().count() > MAX_ID_CHARS {
                mine.push(format!("id is longer than {MAX_ID_CHARS} characters"));
                SentId::Invalid
            } else if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                mine.push("id contains whitespace or control characters".into());
                SentId::Invalid
            } else {
                SentId::Given(t.to_string())
            }
        }
        Some(other) => {
            mine.push(format!(
                "id must be a string, got {}",
                super::json_kind(other)
            ));
            SentId::Invalid
        }
    };
    let sent = Sent {
        pos,
        id,
        content,
        status,
    };
    if !mine.is_empty() {
        problems.push(format!("{}: {}", sent.label(), mine.join("; ")));
    }
    sent
}

/// A goal change as sent: `None` keeps the current goal.
fn parse_goal(v: Option<&Value>, problems: &mut Vec<String>) -> Option<(String, Option<u64>)> {
    let (objective, budget) = match v? {
        Value::Null => return None,
        Value::String(s) => (Some(s), None),
        Value::Object(m) => (
            match m.get("objective") {
                Some(Value::String(s)) => Some(s),
                _ => None,
            },
            m.get("token_budget"),
        ),
        other => {
            problems.push(format!(
                "goal must be an object {{objective, token_budget?}}, got {}",
                super::json_kind(other)
            ));
            return None;
        }
    };
    let mut ok = true;
    let objective = objective.map(|s| s.trim()).unwrap_or("");
    if objective.is_empty() {
        problems.push("goal: objective must be a non-empty string".into());
        ok = false;
    } else if objective.chars().count() > MAX_CONTENT_CHARS {
        problems.push(format!(
            "goal: objective is longer than {MAX_CONTENT_CHARS} characters"
        ));
        ok = false;
    }
    let budget = match budget {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|b| b > 0) => n.as_u64(),
        Some(_) => {
            problems.push("goal: token_budget must be a positive integer".into());
            ok = false;
            None
        }
    };
    ok.then(|| (objective.to_string(), budget))
}

/// Parses every sent item (problems collected, none fatal) and checks the list's size and that
/// at most one item is in progress (case C14).
fn validate(list: &[Value], problems: &mut Vec<String>) -> Vec<Sent> {
    if list.len() > MAX_ITEMS {
        problems.push(format!(
            "{} items; at most {MAX_ITEMS} (drop settled items first)",
            list.len()
        ));
    }
    let sent: Vec<Sent> = list
        .iter()
        .enumerate()
        .map(|(i, v)| parse_item(i + 1, v, problems))
        .collect();
    let active: Vec<String> = sent
        .iter()
        .filter(|s| s.status == Some(Status::InProgress))
        .map(Sent::label)
        .collect();
    if active.len() > 1 {
        problems.push(format!(
            "{} items are in_progress: {}; keep exactly one in_progress",
            active.len(),
            name_list(&active)
        ));
    }
    sent
}

/// Every item's id: the given ones, and for absent ids the lowest positive integers no given id
/// uses, in list order. None (with the problems named) when an id is invalid or duplicated (case
/// C15): the mapping to the current ledger is then unreliable, so the drop check is skipped.
fn assign_ids(sent: &[Sent], problems: &mut Vec<String>) -> Option<Vec<String>> {
    // Duplicate ids, in order of first appearance.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut dups: Vec<(&str, Vec<&Sent>)> = Vec::new();
    for s in sent {
        if let SentId::Given(id) = &s.id {
            match seen.get(id.as_str()) {
                Some(&at) => dups[at].1.push(s),
                None => {
                    seen.insert(id, dups.len());
                    dups.push((id, vec![s]));
                }
            }
        }
    }
    let mut broken = sent.iter().any(|s| matches!(s.id, SentId::Invalid));
    for (id, items) in dups.iter().filter(|(_, v)| v.len() > 1) {
        broken = true;
        let names: Vec<String> = items.iter().map(|s| s.label()).collect();
        problems.push(format!(
            "duplicate id \"{}\": {}",
            snippet(id),
            names.join(", ")
        ));
    }
    if broken {
        return None;
    }
    let mut next = 0u64;
    let ids = sent
        .iter()
        .map(|s| match &s.id {
            SentId::Given(id) => id.clone(),
            _ => loop {
                next += 1;
                let candidate = next.to_string();
                if !seen.contains_key(candidate.as_str()) {
                    break candidate;
                }
            },
        })
        .collect();
    Some(ids)
}

impl Cx<'_> {
    fn reject(&self, problems: &[String]) -> String {
        let mut out = format!("{} rejected; the To-do is unchanged:", self.tool);
        for p in problems.iter().take(MAX_PROBLEM_LINES) {
            out.push_str("\n- ");
            out.push_str(p);
        }
        if problems.len() > MAX_PROBLEM_LINES {
            out.push_str(&format!(
                "\n- … and {} more problems",
                problems.len() - MAX_PROBLEM_LINES
            ));
        }
        out
    }

    /// Full replacement, in steps: validate every item and the goal, assign ids, check what
    /// would be dropped, build the items, check the lifecycle order, then build the ledger.
    /// Every validation problem is reported at once; nothing changes on an error.
    fn replace(
        &self,
        list: Vec<Value>,
        goal: Option<&Value>,
        added: Option<&str>,
    ) -> Result<Applied, DomainError> {
        let mut problems = Vec::new();
        let sent = validate(&list, &mut problems);
        let goal = parse_goal(goal, &mut problems);
        let ids = assign_ids(&sent, &mut problems);
        if let Some(ids) = &ids {
            self.check_drops(ids, &mut problems);
        }
        if !problems.is_empty() {
            return Err(DomainError::Invalid(self.reject(&problems)));
        }
        let items = self.build_items(&sent, ids.unwrap_or_default())?;
        let moved = self.moves(&items);
        self.check_order(&moved)?;
        Ok(self.build(items, goal, !moved.is_empty(), added))
    }

    /// Unfinished items of the current ledger that `ids` leaves out: each needs an explicit
    /// `cancelled` to go (case C16).
    fn check_drops(&self, ids: &[String], problems: &mut Vec<String>) {
        let kept: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let dropped: Vec<String> = self
            .current
            .items
            .iter()
            .filter(|it| !it.status.is_settled() && !kept.contains(it.id.as_str()))
            .map(stored_label)
            .collect();
        if !dropped.is_empty() {
            problems.push(format!(
                "this would drop {} unfinished item(s): {}. Keep them, or send them with \
                 status cancelled to drop them",
                dropped.len(),
                name_list(&dropped)
            ));
        }
    }

    /// The validated items (every field parsed, since no problem was found).
    fn build_items(&self, sent: &[Sent], ids: Vec<String>) -> Result<Vec<Item>, DomainError> {
        let mut items = Vec::with_capacity(sent.len());
        for (s, id) in sent.iter().zip(ids) {
            let (Some(content), Some(status)) = (s.content.clone(), s.status) else {
                return Err(DomainError::Invalid(
                    self.reject(&[format!("{}: could not be read", s.label())]),
                ));
            };
            items.push(Item {
                id,
                content,
                status,
            });
        }
        Ok(items)
    }

    /// The items this update starts or finishes, named for the wrong-order refusal.
    fn moves(&self, items: &[Item]) -> Vec<String> {
        let before: HashMap<&str, Status> = self
            .current
            .items
            .iter()
            .map(|i| (i.id.as_str(), i.status))
            .collect();
        items
            .iter()
            .filter_map(|it| {
                let old = before.get(it.id.as_str()).copied();
                let verb = match it.status {
                    Status::InProgress if old != Some(Status::InProgress) => "start",
                    Status::Completed | Status::Cancelled
                        if !old.is_some_and(Status::is_settled) =>
                    {
                        "finish"
                    }
                    _ => return None,
                };
                Some(format!("{verb} {}", stored_label(it)))
            })
            .collect()
    }

    /// DESIGN.md §5, wrong order: no item starts or finishes while a draft awaits confirmation.
    fn check_order(&self, moved: &[String]) -> Result<(), DomainError> {
        if self.draft_pending && !moved.is_empty() {
            return Err(DomainError::Refused(format!(
                "{} refused; the To-do is unchanged: a plan draft is waiting. Confirm it with \
                 plan_confirm or cancel it with plan_cancel before starting or finishing items \
                 (this update would {}). Adding or editing pending items is fine meanwhile.",
                self.tool,
                name_list(moved)
            )));
        }
        Ok(())
    }

    /// The next ledger (revision + 1) and the reply the model reads.
    fn build(
        &self,
        items: Vec<Item>,
        goal: Option<(String, Option<u64>)>,
        started_or_finished: bool,
        added: Option<&str>,
    ) -> Applied {
        let goal = match goal {
            None => self.current.goal.clone(),
            Some((objective, token_budget)) => {
                let started_at = match &self.current.goal {
                    Some(g) if g.objective == objective => g.started_at.or(Some(self.now_unix)),
                    _ => Some(self.now_unix),
                };
                Some(Goal {
                    objective,
                    token_budget,
                    started_at,
                })
            }
        };
        let ledger = Ledger {
            goal,
            items,
            revision: self.current.revision.saturating_add(1),
        };
        let mut reply = String::new();
        if let Some(id) = added {
            reply.push_str(&format!("Added #{id}. "));
        }
        // Short: the work-state block shows the whole list with the next request.
        reply.push_str(&format!(
            "To-do saved: {}/{} settled, ",
            ledger.settled(),
            ledger.items.len()
        ));
        match ledger.in_progress() {
            Some((_, it)) => reply.push_str(&format!("#{} in progress.", snippet(&it.id))),
            None => reply.push_str("nothing in progress."),
        }
        Applied {
            ledger,
            reply,
            started_or_finished,
        }
    }

    /// The current items as a list to send through [`Cx::replace`].
    fn current_list(&self) -> Vec<Value> {
        self.current
            .items
            .iter()
            .map(|it| json!({"id": it.id, "content": it.content, "status": it.status.as_str()}))
            .collect()
    }

    /// `checklist_add {content, status?, id?}`.
    fn add(&self, args: &Map<String, Value>) -> Result<Applied, DomainError> {
        let id = match args.get("id") {
            None | Some(Value::Null) => {
                let max = self
                    .current
                    .items
                    .iter()
                    .filter_map(|i| i.id.parse::<u64>().ok())
                    .max()
                    .unwrap_or(0);
                let taken: HashSet<&str> =
                    self.current.items.iter().map(|i| i.id.as_str()).collect();
                // The largest numeric id + 1; when that overflows (an id of u64::MAX), the lowest
                // free positive number. Either way the search ends: fewer ids exist than numbers.
                let n = max
                    .checked_add(1)
                    .filter(|n| !taken.contains(n.to_string().as_str()))
                    .unwrap_or_else(|| {
                        (1..=u64::MAX)
                            .find(|n| !taken.contains(n.to_string().as_str()))
                            .unwrap_or(0)
                    });
                Value::String(n.to_string())
            }
            Some(v) => v.clone(),
        };
        let mut item = Map::new();
        item.insert("id".into(), id.clone());
        item.insert(
            "content".into(),
            args.get("content").cloned().unwrap_or(Value::Null),
        );
        item.insert(
            "status".into(),
            args.get("status")
                .cloned()
                .unwrap_or_else(|| Value::String("pending".into())),
        );
        let mut list = self.current_list();
        list.push(Value::Object(item));
        let shown = match &id {
            Value::String(s) => s.trim().to_string(),
            other => other.to_string(),
        };
        self.replace(list, None, Some(&shown))
    }

    /// `checklist_update {id, status?, content?}`.
    fn update_one(&self, args: &Map<String, Value>) -> Result<Applied, DomainError> {
        let tool = self.tool;
        let id = match args.get("id") {
            Some(Value::String(s)) => s.trim().to_string(),
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                return Err(DomainError::Invalid(format!(
                    "{tool}: id is required (the item to change)."
                )));
            }
        };
        let (status, content) = (args.get("status"), args.get("content"));
        if status.is_none() && content.is_none() {
            return Err(DomainError::Invalid(format!(
                "{tool}: give status or content to change #{id}."
            )));
        }
        let Some(at) = self.current.items.iter().position(|i| i.id == id) else {
            let known: Vec<String> = self
                .current
                .items
                .iter()
                .map(|i| format!("#{}", snippet(&i.id)))
                .collect();
            return Err(DomainError::Invalid(format!(
                "{tool}: no To-do item has id \"{}\" (ids: {}).",
                snippet(&id),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    name_list(&known)
                }
            )));
        };
        let mut list = self.current_list();
        if let Some(Value::Object(m)) = list.get_mut(at) {
            if let Some(s) = status {
                m.insert("status".into(), s.clone());
            }
            if let Some(c) = content {
                m.insert("content".into(), c.clone());
            }
        }
        self.replace(list, None, None)
    }
}

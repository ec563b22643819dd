//! A unified diff of two texts, for `tern diff` from the door's record ([`super::record`]): the
//! shortest edit script (Myers 1986, "An O(ND) Difference Algorithm and Its Variations"), in
//! the hunk format of GNU diff and git (three lines of context, `@@ -a,b +c,d @@`).

/// Most edit distance searched: beyond it the middle is shown replaced whole (still a correct
/// patch, only longer).
const MAX_D: usize = 4000;

/// One line of the edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same(usize, usize),
    Del(usize),
    Add(usize),
}

/// The hunks turning `a` into `b` (lines split after each `\n`), empty when they are equal.
/// A missing final newline is marked as git does (`\ No newline at end of file`).
pub fn unified(a: &str, b: &str) -> String {
    let x: Vec<&str> = a.split_inclusive('\n').collect();
    let y: Vec<&str> = b.split_inclusive('\n').collect();
    let ops = script(&x, &y);
    if ops.iter().all(|o| matches!(o, Op::Same(..))) {
        return String::new();
    }
    let mut out = String::new();
    // Hunks: runs of changes with up to 3 lines of context, merged when 6 or fewer apart.
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| !matches!(o, Op::Same(..)))
        .map(|(i, _)| i)
        .collect();
    let mut start = 0;
    while start < changed.len() {
        let mut end = start;
        while end + 1 < changed.len() && changed[end + 1] - changed[end] <= 7 {
            end += 1;
        }
        let lo = changed[start].saturating_sub(3);
        let hi = (changed[end] + 4).min(ops.len());
        hunk(&ops[lo..hi], &x, &y, &mut out);
        start = end + 1;
    }
    out
}

/// Writes one hunk of `ops`.
fn hunk(ops: &[Op], x: &[&str], y: &[&str], out: &mut String) {
    let first_a = ops.iter().find_map(|o| match o {
        Op::Same(i, _) | Op::Del(i) => Some(*i),
        Op::Add(_) => None,
    });
    let first_b = ops.iter().find_map(|o| match o {
        Op::Same(_, j) | Op::Add(j) => Some(*j),
        Op::Del(_) => None,
    });
    let na = ops.iter().filter(|o| !matches!(o, Op::Add(_))).count();
    let nb = ops.iter().filter(|o| !matches!(o, Op::Del(_))).count();
    // An empty side starts "before" its line: git writes `-0,0` for an empty file.
    let sa = first_a.map_or_else(|| start_of_empty(ops, true), |i| i + 1);
    let sb = first_b.map_or_else(|| start_of_empty(ops, false), |j| j + 1);
    out.push_str(&format!("@@ -{} +{} @@\n", range(sa, na), range(sb, nb)));
    for o in ops {
        let (mark, line) = match *o {
            Op::Same(i, _) => (' ', x[i]),
            Op::Del(i) => ('-', x[i]),
            Op::Add(j) => ('+', y[j]),
        };
        out.push(mark);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

/// The line before which an empty side of a hunk sits (the hunk only adds, or only removes).
fn start_of_empty(ops: &[Op], a_side: bool) -> usize {
    ops.iter()
        .find_map(|o| match (*o, a_side) {
            (Op::Add(j), true) => Some(j),
            (Op::Del(i), false) => Some(i),
            _ => None,
        })
        .unwrap_or(0)
}

fn range(start: usize, len: usize) -> String {
    if len == 1 {
        start.to_string()
    } else {
        format!("{start},{len}")
    }
}

/// The edit script from `x` to `y`: common ends first, then Myers' greedy search on the middle.
fn script(x: &[&str], y: &[&str]) -> Vec<Op> {
    let pre = x.iter().zip(y).take_while(|(a, b)| a == b).count();
    let suf = x[pre..]
        .iter()
        .rev()
        .zip(y[pre..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (mx, my) = (&x[pre..x.len() - suf], &y[pre..y.len() - suf]);
    let mut ops: Vec<Op> = (0..pre).map(|i| Op::Same(i, i)).collect();
    match myers(mx, my) {
        Some(mid) => ops.extend(mid.into_iter().map(|o| match o {
            Op::Same(i, j) => Op::Same(i + pre, j + pre),
            Op::Del(i) => Op::Del(i + pre),
            Op::Add(j) => Op::Add(j + pre),
        })),
        None => {
            ops.extend((0..mx.len()).map(|i| Op::Del(i + pre)));
            ops.extend((0..my.len()).map(|j| Op::Add(j + pre)));
        }
    }
    let (ex, ey) = (x.len() - suf, y.len() - suf);
    ops.extend((0..suf).map(|k| Op::Same(ex + k, ey + k)));
    ops
}

/// Myers' forward search, keeping each round's frontier to walk the path back. None beyond
/// [`MAX_D`].
fn myers(x: &[&str], y: &[&str]) -> Option<Vec<Op>> {
    let (n, m) = (x.len(), y.len());
    let max = (n + m).min(MAX_D);
    let off = max + 1;
    let mut v = vec![0usize; 2 * max + 3];
    let mut trace: Vec<Vec<usize>> = Vec::new();
    for d in 0..=max {
        trace.push(v.clone());
        let mut k = -(d as isize);
        while k <= d as isize {
            let ki = (k + off as isize) as usize;
            let mut i = if k == -(d as isize) || (k != d as isize && v[ki - 1] < v[ki + 1]) {
                v[ki + 1]
            } else {
                v[ki - 1] + 1
            };
            let mut j = (i as isize - k) as usize;
            while i < n && j < m && x[i] == y[j] {
                i += 1;
                j += 1;
            }
            v[ki] = i;
            if i >= n && j >= m {
                return Some(back(&trace, x.len(), y.len(), d, off));
            }
            k += 2;
        }
    }
    None
}

/// Walks the frontiers of [`myers`] back from the end to the start.
fn back(trace: &[Vec<usize>], n: usize, m: usize, d_end: usize, off: usize) -> Vec<Op> {
    let mut ops = Vec::new();
    let (mut i, mut j) = (n, m);
    for d in (1..=d_end).rev() {
        let v = &trace[d];
        let k = i as isize - j as isize;
        let ki = (k + off as isize) as usize;
        let down = k == -(d as isize) || (k != d as isize && v[ki - 1] < v[ki + 1]);
        let pk = if down { k + 1 } else { k - 1 };
        let pi = v[(pk + off as isize) as usize];
        let pj = (pi as isize - pk) as usize;
        // The snake after the step.
        let (si, sj) = if down { (pi, pj + 1) } else { (pi + 1, pj) };
        while i > si && j > sj {
            i -= 1;
            j -= 1;
            ops.push(Op::Same(i, j));
        }
        if down {
            ops.push(Op::Add(pj));
        } else {
            ops.push(Op::Del(pi));
        }
        (i, j) = (pi, pj);
    }
    while i > 0 && j > 0 {
        i -= 1;
        j -= 1;
        ops.push(Op::Same(i, j));
    }
    ops.reverse();
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies a unified diff to `a` (the test's own reader of the format).
    fn apply(a: &str, patch: &str) -> String {
        let x: Vec<&str> = a.split_inclusive('\n').collect();
        let mut out = String::new();
        let mut at = 0;
        let mut lines = patch.lines().peekable();
        while let Some(l) = lines.next() {
            if let Some(h) = l.strip_prefix("@@ -") {
                let a_start: usize = h
                    .split([',', ' '])
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap();
                let a_len: usize = if h.split(' ').next().unwrap().contains(',') {
                    h.split([',', ' ']).nth(1).unwrap().parse().unwrap()
                } else {
                    1
                };
                let from = if a_len == 0 { a_start } else { a_start - 1 };
                while at < from {
                    out.push_str(x[at]);
                    at += 1;
                }
                continue;
            }
            let no_nl = lines.peek().is_some_and(|n| n.starts_with('\\'));
            let body = &l[1..];
            let full = if no_nl {
                body.to_string()
            } else {
                format!("{body}\n")
            };
            match l.chars().next() {
                Some(' ') => {
                    out.push_str(&full);
                    at += 1;
                }
                Some('-') => at += 1,
                Some('+') => out.push_str(&full),
                _ => {}
            }
        }
        while at < x.len() {
            out.push_str(x[at]);
            at += 1;
        }
        out
    }

    #[test]
    fn a_patch_turns_one_text_into_the_other() {
        let cases = [
            ("", "one\n"),
            ("one\n", ""),
            ("zero\n", "one\n"),
            ("a\nb\nc\n", "a\nc\n"),
            ("a\nb\nc", "a\nb\nc\n"),
            (
                "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n",
                "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\nY\n12\n",
            ),
            ("a\nb\na\nb\n", "b\na\nb\na\n"),
        ];
        for (a, b) in cases {
            let p = unified(a, b);
            assert_eq!(apply(a, &p), b, "{a:?} -> {b:?}:\n{p}");
        }
        assert_eq!(unified("same\n", "same\n"), "");
    }

    #[test]
    fn hunks_carry_git_s_headers_and_context() {
        assert_eq!(unified("zero\n", "one\n"), "@@ -1 +1 @@\n-zero\n+one\n");
        assert_eq!(unified("", "one\n"), "@@ -0,0 +1 @@\n+one\n");
        let far = unified(
            "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n",
            "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\nY\n15\n",
        );
        assert_eq!(far.matches("@@ -").count(), 2, "{far}");
    }

    #[test]
    fn pseudo_random_edits_round_trip() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) as usize
        };
        for _ in 0..200 {
            let a: String = (0..next() % 30)
                .map(|_| format!("{}\n", next() % 5))
                .collect();
            let b: String = (0..next() % 30)
                .map(|_| format!("{}\n", next() % 5))
                .collect();
            assert_eq!(apply(&a, &unified(&a, &b)), b, "{a:?} -> {b:?}");
        }
    }
}

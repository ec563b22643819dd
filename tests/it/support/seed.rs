//! The seed's Work surface: what `tern status` (and the sidebar renderer) must print for the
//! seed's ledger.
#![allow(dead_code)]

/// The terminal capture of seeds/work-surface.txt, line for line: goal started 18 m ago, 90 000
/// of 200 000 tokens used, items 1–2 completed, 3 in progress, 4 pending.
pub const SEED_CAPTURE: &str = "\
To-do
◆ Goal: Land the v0.9.2 website docs cluster
elapsed: 18m
[█████████░░░░░░░░░░░] 45% of the token budget
50% settled (2/4)
[✓] #1 Read docs-map.ts and the Modes page pattern
[✓] #2 Draft the Fleet and Sandbox pages
[~] #3 Write the Work surface page
[ ] #4 Run check:docs, tests, and the build
";

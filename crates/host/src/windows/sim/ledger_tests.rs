//! The ledger (`LEDGER.md`) against the code: every function a row names (the tests relying on
//! the row, the simulator's knobs, the daemon's rules) exists, so a renamed or deleted test
//! cannot leave a row citing what no longer checks it.

use std::collections::HashSet;
use std::path::Path;

/// Every `fn <name>` in the `.rs` files below `dir`.
fn functions(dir: &Path, out: &mut HashSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            functions(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, _) in text.match_indices("fn ") {
                let name: String = text[i + 3..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name);
            }
        }
    }
}

/// Whether a backticked word of the ledger reads as a function name: lower snake case with
/// at least two underscores (`restart_wmi_with`, a test's sentence of a name), not a file, a
/// flag or a Windows constant.
fn names_a_function(word: &str) -> bool {
    word.matches('_').count() >= 2
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

#[test]
fn every_function_a_ledger_row_names_exists() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crates = here.parent().unwrap();
    let mut known = HashSet::new();
    functions(crates, &mut known);
    let ledger = std::fs::read_to_string(here.join("src/windows/sim/LEDGER.md")).unwrap();
    let mut named = 0;
    let mut missing = Vec::new();
    for line in ledger.lines() {
        let Some(n) = line
            .strip_prefix("| ")
            .and_then(|r| r.split_once(" |"))
            .and_then(|(n, _)| n.parse::<u32>().ok())
        else {
            continue;
        };
        for word in line.split('`').skip(1).step_by(2) {
            // A test named with its file (`race_tests.rs`) or a path: the last word.
            let word = word.rsplit("::").next().unwrap_or(word);
            if names_a_function(word) {
                named += 1;
                if !known.contains(word) {
                    missing.push(format!("row {n}: `{word}`"));
                }
            }
        }
    }
    assert!(
        named > 150,
        "only {named} function names read from the ledger"
    );
    assert!(
        missing.is_empty(),
        "named but not found:\n{}",
        missing.join("\n")
    );
}

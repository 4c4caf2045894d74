//! No request path spawns a process: the Windows hosts, the platform-neutral parsers, and the core
//! and server crates contain no process-spawning API at all. The scan runs on every platform, so
//! Linux CI enforces it for the Windows code too.
//!
//! The Linux hosts are not scanned: formatting on Linux runs `mkfs` by design.

use std::path::{Path, PathBuf};

/// Spellings of process creation in Rust and Win32 (and the shells upstream used to spawn).
const FORBIDDEN: &[&str] = &[
    "std::process::Command",
    "process::Command",
    "Command::new",
    "CreateProcess",
    "ShellExecute",
    "WinExec",
    "powershell",
    "cmd.exe",
    "posix_spawn",
    "execve",
    "libc::fork",
    "tokio::process",
];

/// Source trees that serve requests on Windows.
const SCANNED: &[&str] = &[
    "crates/host/src/windows",
    "crates/formats/src",
    "crates/core/src",
    "crates/server/src",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/host is two levels below the workspace root")
        .to_path_buf()
}

fn rust_files(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(p)
            .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for e in entries {
            rust_files(&e, out);
        }
    } else if p.extension().is_some_and(|x| x == "rs") {
        out.push(p.to_path_buf());
    }
}

/// Whether a line is a comment (doc or plain), where naming the forbidden APIs is allowed.
fn is_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("//")
}

#[test]
fn request_paths_spawn_no_process() {
    let root = workspace_root();
    let mut files = Vec::new();
    for s in SCANNED {
        let p = root.join(s);
        assert!(p.exists(), "scanned path {} is missing", p.display());
        rust_files(&p, &mut files);
    }
    assert!(files.len() > 10, "scanned only {} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text =
            std::fs::read_to_string(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
        for (n, line) in text.lines().enumerate() {
            if is_comment(line) {
                continue;
            }
            let lower = line.to_lowercase();
            for word in FORBIDDEN {
                if lower.contains(&word.to_lowercase()) {
                    found.push(format!(
                        "{}:{}: {word}: {}",
                        f.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "process spawning on a request path:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_catches_each_spelling() {
    for word in FORBIDDEN {
        let line = format!("let x = {word}(\"x\");");
        assert!(!is_comment(&line));
        assert!(line.to_lowercase().contains(&word.to_lowercase()));
    }
    assert!(is_comment("    /// runs powershell upstream"));
}

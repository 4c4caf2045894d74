//! Replays the checked-in corpus through the harnesses on the stable toolchain, without
//! libFuzzer: `cargo test --manifest-path fuzz/Cargo.toml`.

use arbitrary::{Arbitrary, Unstructured};
use csi_proxy_core::paths::PathStyle;
use std::path::Path;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

fn paths(target: &str, style: PathStyle) {
    for data in corpus(target) {
        // libfuzzer-sys builds typed inputs with `arbitrary_take_rest`.
        if let Ok(case) = csi_proxy_fuzz::paths::Case::arbitrary_take_rest(Unstructured::new(&data))
        {
            csi_proxy_fuzz::paths::run(style, &case);
        }
    }
}

#[test]
fn paths_posix_corpus_holds() {
    paths("paths_posix", PathStyle::Posix);
}

#[test]
fn paths_windows_corpus_holds() {
    paths("paths_windows", PathStyle::Windows);
}

#[test]
fn authority_corpus_holds() {
    for data in corpus("authority") {
        csi_proxy_fuzz::authority::run(&data);
    }
}

#[test]
fn disk_content_corpus_holds() {
    for data in corpus("disk_content") {
        csi_proxy_fuzz::disk_content::run(&data);
    }
}

#[test]
fn wire_text_corpus_holds() {
    for data in corpus("wire_text") {
        csi_proxy_fuzz::wire_text::run(&data);
    }
}

#[test]
fn windows_buffers_corpus_holds() {
    for data in corpus("windows_buffers") {
        csi_proxy_fuzz::windows_buffers::run(&data);
    }
}

#[test]
fn profile_records_corpus_holds() {
    let named = corpus("profile_records")
        .iter()
        .filter(|data| csi_proxy_fuzz::profile_records::run(data))
        .count();
    // The seeds include records kubelet writes: each names its driver.
    assert!(named >= 2, "{named} named a driver");
}

#[test]
fn dbus_message_corpus_holds() {
    let decoded = corpus("dbus_message")
        .iter()
        .filter(|data| csi_proxy_fuzz::dbus_message::run(data))
        .count();
    // The seeds are valid messages: the fuzzer starts from messages that decode.
    assert!(decoded >= 3, "{decoded} decoded");
}

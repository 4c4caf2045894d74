//! Compiles every `proto/<group>/<version>.proto` with protox (no system protoc) into its own
//! output directory: upstream reuses package names (`v1`, `v1alpha1`, ...) across groups, so each
//! group-version needs its own Rust module while the wire package stays untouched.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest.join("../../proto").canonicalize()?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={}", proto_root.display());

    let mut groups: Vec<_> = std::fs::read_dir(&proto_root)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    groups.sort_by_key(|e| e.file_name());
    for group in groups {
        let group_dir = group.path();
        let group_name = group.file_name().into_string().expect("utf-8 group name");
        let mut files: Vec<_> = std::fs::read_dir(&group_dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "proto"))
            .collect();
        files.sort();
        for file in files {
            compile_one(&group_dir, &group_name, &file, &out_dir)?;
        }
    }
    Ok(())
}

/// Messages whose fields include a secret (SMB password, CHAP secrets).
const SECRET_MESSAGES: &[&str] = &[
    "NewSmbGlobalMappingRequest",
    "ConnectTargetRequest",
    "SetMutualChapSecretRequest",
];

fn compile_one(
    group_dir: &Path,
    group: &str,
    file: &Path,
    out_dir: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let version = file
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("utf-8 version");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([file], [group_dir])?;
    let dest = out_dir.join(group).join(version);
    std::fs::create_dir_all(&dest)?;
    // The descriptor set is kept so the contract test (and anything else) can check what was
    // compiled, not only what the .proto text says.
    let fds_bytes = prost::Message::encode_to_vec(&fds);
    std::fs::write(dest.join("descriptor.bin"), fds_bytes)?;
    // Messages that carry a password or CHAP secret get a hand-written redacting Debug
    // (src/lib.rs), so a `{:?}` of a request can never print a secret.
    let secret_messages: Vec<String> = SECRET_MESSAGES
        .iter()
        .map(|m| format!(".{version}.{m}"))
        .collect();
    tonic_prost_build::configure()
        .skip_debug(secret_messages)
        .build_client(true)
        .build_server(true)
        .out_dir(&dest)
        .compile_fds(fds)?;
    Ok(())
}

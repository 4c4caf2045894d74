#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ on the stable toolchain.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#
#   SECONDS  how long each target runs (default 30); targets run one after another
#   TARGET   paths_posix, paths_windows, authority, disk_content, wire_text, windows_buffers,
#            dbus_message
#            (default: all)
#
# cargo-fuzz needs nightly-only compiler flags (sanitizers, coverage passes); CI machines have
# only stable, so RUSTC_BOOTSTRAP=1 lets stable accept them. New inputs the fuzzer finds go to
# fuzz/corpus/<target>/ (the seed corpus kept in the repo); crashes go to
# fuzz/artifacts/<target>/ and make this script exit 1. Replay one with
#   RUSTC_BOOTSTRAP=1 cargo +stable fuzz run --target-dir target/fuzz <target> fuzz/artifacts/<target>/<file>
# The corpus also replays without libFuzzer: cargo test --manifest-path fuzz/Cargo.toml
#
# Environment: FUZZ_JOBS (default 1) parallel libFuzzer jobs per target; FUZZ_CORPUS_RO=1 runs
# against a temporary copy of the corpus, leaving fuzz/corpus/ unchanged; FUZZ_DEV=1 builds
# without optimisation (builds in a fraction of the time, runs slower: for CI smoke runs);
# FUZZ_UNIT_TIMEOUT seconds one input may take before it is reported as a hang (10, or 120 with
# FUZZ_DEV=1); FUZZ_TARGET_DIR where it builds (default target/fuzz, apart from the workspace's
# stable builds).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"

SECONDS_EACH="${1:-30}"
shift || true
TARGETS=("$@")
(( ${#TARGETS[@]} )) || TARGETS=(paths_posix paths_windows authority disk_content wire_text windows_buffers dbus_message profile_records)

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

export RUSTC_BOOTSTRAP=1
# The stable toolchain explicitly, even where a nightly is installed as well.
TOOLCHAIN=(+stable)
command -v rustup >/dev/null 2>&1 || TOOLCHAIN=()

BUILD=()
# One input may take this long before it counts as a hang: 10 s optimised; an unoptimised build
# (FUZZ_DEV=1) runs the same input tens of times slower, so it gets 120 s.
UNIT_TIMEOUT="${FUZZ_UNIT_TIMEOUT:-10}"
if [[ "${FUZZ_DEV:-}" == 1 ]]; then
    BUILD=(--dev)
    UNIT_TIMEOUT="${FUZZ_UNIT_TIMEOUT:-120}"
fi

# A target directory of fuzz's own: with RUSTC_BOOTSTRAP=1 set, build scripts (anyhow's,
# thiserror's, proc-macro2's) probe nightly features, and cargo would reuse those probes in the
# workspace's stable builds if both shared one directory.
FUZZ_TARGET_DIR="${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/fuzz}"

status=0
for t in "${TARGETS[@]}"; do
    corpus="corpus/$t"
    tmp=""
    if [[ "${FUZZ_CORPUS_RO:-}" == 1 ]]; then
        tmp="$(mktemp -d)"
        cp -r "$corpus/." "$tmp/"
        corpus="$tmp"
    fi
    echo "==> fuzz $t for ${SECONDS_EACH}s"
    if ! cargo "${TOOLCHAIN[@]}" fuzz run "${BUILD[@]}" --target-dir "$FUZZ_TARGET_DIR" "$t" "$corpus" --jobs "${FUZZ_JOBS:-1}" -- \
        -max_total_time="$SECONDS_EACH" -timeout="$UNIT_TIMEOUT" -rss_limit_mb=2048 \
        -print_final_stats=1; then
        echo "fuzz.sh: target $t FAILED (see fuzz/artifacts/$t/)" >&2
        status=1
    fi
    [[ -n "$tmp" ]] && rm -rf "$tmp"
done
exit "$status"

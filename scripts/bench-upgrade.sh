#!/usr/bin/env bash
# Upgrade figures: four grpc-go-like clients (crates/csi-proxy/tests/common/go_client.rs) each hold
# one channel and call filesystem v1 PathExists every 2 ms while the daemon binary is replaced in
# three ways: a new daemon started with --take-over (the hand-off); a new one started beside the old
# one, which gets SIGTERM 1.5 s later (a surge without the hand-off: the new one is restarted every
# 10 ms while the old one serves); SIGTERM the old one, then start the new one (`systemctl restart`
# without socket activation). Prints one table row per run: answers, failed calls, the longest time
# a client waited for an answer. BENCHMARKS.md ("Upgrade without a failed call") has the figures.
# Linux, as root. `--debug` measures the debug build (no release build needed); UPGRADE_RUNS=n sets
# the runs per order (3).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=(--release)
if [ "${1:-}" = "--debug" ]; then profile=(); fi
cargo test "${profile[@]}" -p csi-proxy --test handoff_e2e upgrade_figures -- --ignored \
    --nocapture --test-threads=1 2>&1 | grep -E '\||test result|panicked' \
    | sed 's/^test upgrade_figures \.\.\. //'

#!/usr/bin/env bash
# Benchmarks csi-proxy: builds the daemon and the bench tool in release, runs them, prints one
# table (Markdown). Linux; run as root for the loop-device stage flow (otherwise it says n/a).
# Takes about 3 minutes after the build on 2 cores (--no-layers: about 2). Extra arguments go
# to csi-proxy-bench (see `target/release/csi-proxy-bench --help`); `--daemon PATH` measures that
# daemon binary instead of the one just built (before/after comparisons). Honours
# CARGO_TARGET_DIR.
#
#   scripts/bench.sh --wine [ARGS]   the Windows build under wine instead: wineserver requests per
#                                    call next to latency and throughput (scripts/bench-wine.sh ARGS)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == --wine ]]; then
    shift
    exec scripts/bench-wine.sh "$@"
fi
cargo build --release --locked -p csi-proxy -p csi-proxy-bench
release="${CARGO_TARGET_DIR:-target}/release"
# `--daemon PATH` measures another daemon binary (e.g. an older build) with this bench.
daemon="$release/csi-proxy"
args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --daemon) daemon="$2"; shift 2 ;;
        --daemon=*) daemon="${1#--daemon=}"; shift ;;
        *) args+=("$1"); shift ;;
    esac
done
ls -l "$daemon" | awk '{printf "daemon binary: %.1f MiB (%d bytes)\n", $5/1048576, $5}'
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$release/csi-proxy-bench" --daemon "$daemon" "${args[@]}"

#!/usr/bin/env bash
# The memory attacks at their full size against the daemon binary (Linux, as root for the daemon's
# sockets): 3,000 connections that send the HTTP/2 preface and SETTINGS and go silent, plus 2
# connections x 120 Mkdir streams each sending 4,000,000 - 100 bytes of a 4,000,000-byte message and
# stalling. Prints the daemon's RSS before and under the attack and how long another client's
# PathExists and Mkdir took; BENCHMARKS.md ("Memory under attack") has the figures. Fails if RSS
# grows past the ceiling the limits give (crates/server/src/limits.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
CSI_PROXY_ATTACK=full cargo test --release -p csi-proxy --test memory_limits_e2e \
    stalled_bodies_and_idle_connections -- --nocapture 2>&1 | grep -E 'RSS|test result|panicked'

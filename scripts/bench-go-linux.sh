#!/usr/bin/env bash
# Linux benchmark with grpc-go: filesystem v1 PathExists against the gRPC health check on the same
# Unix socket, for one or more daemon binaries in interleaved rounds (the goal: PathExists p50 at
# most 1.0 times the health check's). The health check is a unary call that does no file system
# work, so the ratio shows what the path work adds over the gRPC transport, in a form that carries
# between machines better than microseconds do.
#
#   scripts/bench-go-linux.sh --upstream-git MIRROR --daemon main=BIN [--daemon before=BIN2 ...]
#   scripts/bench-go-linux.sh --upstream-src DIR --daemon main=BIN ...
#
# Options: --rounds N (default 3), --calls N (measured pairs per run, default 4000), --warmup N
# (pairs before them, default 500), --upstream-tag TAG (with --upstream-git, default v1.1.3),
# --go-client BIN (already built: no upstream tree needed). Prints one Markdown table: per
# daemon the medians over rounds of PathExists p50, health Check p50 and their ratio (with its
# range over rounds), the p99s, and how busy the machine was (all processes, the benchmark's own
# ping-pong included: about one core) during the runs.
#
# Why grpc-go: drivers are Go programs calling upstream's generated stubs, and grpc-go writes a
# unary call's HEADERS and DATA together where our Rust client does not, so the daemon sees the
# reads and writes a driver causes. The client is scripts/bench-wine-go-client built for
# linux/amd64 in an upstream source tree (scripts/go-client-build.sh, shared with bench-wine.sh;
# DIR is not changed, --upstream-git extracts TAG into a temporary one). With -pair-health it
# alternates PathExists (upstream's generated FilesystemClient) and a grpc.health.v1 Check on one
# connection, so both see the same connection, daemon state and machine load.
#
# Each run starts the daemon fresh in a temporary directory (--kubelet-path, --socket-dir,
# --state-dir under it) and asks about `kubelet/x`, a directory that exists (depth 1). Daemons
# should be release-like builds (e.g. `--profile bench-wine`): a debug build distorts the ratio.
# A --daemon value may carry arguments after the binary (`LABEL=BIN ARG...`, split on spaces):
# `--daemon "floor=target/bench-wine/csi-proxy-bench-server --layers noop"` measures plain tonic
# answering PathExists with no work, the floor of the ratio on this machine.
set -euo pipefail
caller="$PWD"
cd "$(dirname "$0")/.."
repo="$PWD"
# Paths given relative to where the script was called from.
abs() { if [[ -z "$1" || "$1" == /* ]]; then printf '%s' "$1"; else printf '%s' "$caller/$1"; fi; }

rounds=3 calls=4000 warmup=500 upstream_src="" upstream_git="" tag=v1.1.3 go_client="" client_desc=""
labels=() bins=()
while (($#)); do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --calls) calls="$2"; shift 2 ;;
        --warmup) warmup="$2"; shift 2 ;;
        --upstream-src) upstream_src="$(abs "$2")"; shift 2 ;;
        --upstream-git) upstream_git="$(abs "$2")"; shift 2 ;;
        --upstream-tag) tag="$2"; shift 2 ;;
        --go-client) go_client="$(abs "$2")"; shift 2 ;;
        --daemon)
            [[ "$2" == ?*=?* ]] || { echo "bench-go-linux: --daemon takes LABEL=PATH, not $2" >&2; exit 2; }
            labels+=("${2%%=*}") bins+=("$(abs "${2#*=}")"); shift 2 ;;  # BIN [ARG...]
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "bench-go-linux: unknown argument: $1" >&2; exit 2 ;;
    esac
done
((${#labels[@]})) || { echo "bench-go-linux: no --daemon LABEL=PATH given" >&2; exit 2; }
for b in "${bins[@]}"; do
    [[ -x "${b%% *}" ]] || { echo "bench-go-linux: no such binary: ${b%% *}" >&2; exit 1; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/csi-proxy-bench-go-linux.XXXXXX")"
daemon=""
cleanup() {
    [[ -z "$daemon" ]] || { kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; } || true
    rm -rf "$work"
}
trap cleanup EXIT

if [[ -z "$go_client" ]]; then
    # shellcheck source=scripts/go-client-build.sh
    . "$repo/scripts/go-client-build.sh"
    if [[ -z "$upstream_src" ]]; then
        [[ -n "$upstream_git" ]] || { echo "bench-go-linux: give --upstream-src DIR, --upstream-git MIRROR or --go-client BIN" >&2; exit 2; }
        upstream_src="$work/upstream"
        mkdir "$upstream_src"
        git --git-dir="$upstream_git" archive "$tag" | tar -x -C "$upstream_src"
    fi
    go_upstream_ready bench-go-linux "$upstream_src"
    echo "building the Go client (linux/amd64) in $upstream_src with $(go version)" >&2
    go_client="$work/bench-client"
    client_desc="built in ${upstream_git:+$upstream_git $tag, extracted to }$upstream_src with $(go version)"
    go_client_build "$upstream_src" linux "$go_client" "$work/overlay.json"
fi

# The machine's busy and total CPU time so far (all processes; busy is all but idle and iowait).
cpu_times() { awk 'NR == 1 { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }

# Runs daemon $2 (of label $1) fresh and the client against it; appends the PAIR line and how busy
# the machine was meanwhile to $work/<label>.results.
run_once() {
    local label="$1" bin="$2" d cmd
    read -ra cmd <<<"$bin"
    d="$(mktemp -d "$work/run.XXXXXX")"
    mkdir -p "$d/kubelet/x" "$d/run" "$d/state"
    "${cmd[@]}" --kubelet-path="$d/kubelet" --socket-dir="$d/run" --state-dir="$d/state" \
        </dev/null >"$d/daemon.out" 2>"$d/daemon.err" &
    daemon=$!
    local b0 t0 b1 t1
    read -r b0 t0 < <(cpu_times)
    if ! "$go_client" -pair-health -socket "$d/run/csi-proxy-filesystem-v1.sock" -path "$d/kubelet/x" \
        -calls "$calls" -warmup "$warmup" -wait 30 >"$d/client.out" 2>"$d/client.err" </dev/null; then
        echo "bench-go-linux: the client failed against $bin:" >&2
        cat "$d/client.err" >&2
        tail -n 20 "$d/daemon.err" >&2
        exit 1
    fi
    read -r b1 t1 < <(cpu_times)
    kill "$daemon" && wait "$daemon" || true
    daemon=""
    echo "$(grep '^PAIR ' "$d/client.out") busy_pct=$(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))" \
        >>"$work/$label.results"
    rm -rf "$d"
}

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
    for i in "${!labels[@]}"; do
        echo "round $r: ${labels[i]}" >&2
        run_once "${labels[i]}" "${bins[i]}"
    done
done

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average (1, 5, 15 min) $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
for i in "${!labels[@]}"; do echo "daemon ${labels[i]}: ${bins[i]}"; done
echo "client: ${client_desc:-$go_client}; $rounds round(s), medians; $calls pairs per run after $warmup warm-up pairs; path depth 1"
echo
python3 - "$work" "${labels[@]}" <<'PY'
import statistics, sys
work, labels = sys.argv[1], sys.argv[2:]
print("| daemon | PathExists p50 | health Check p50 | **ratio p50** (range) | PathExists p99 | Check p99 | ratio p99 | machine busy (range) |")
print("|---|---|---|---|---|---|---|---|")
for l in labels:
    runs = []
    for line in open(f"{work}/{l}.results"):
        f = line.split()
        runs.append({k: float(v) for k, v in (kv.split("=") for kv in f[1:])})
    m = lambda k: statistics.median(r[k] for r in runs)
    lo = lambda k: min(r[k] for r in runs)
    hi = lambda k: max(r[k] for r in runs)
    print(f"| {l} | {m('pathexists_p50_us'):.0f} µs | {m('check_p50_us'):.0f} µs "
          f"| **{m('ratio_p50'):.2f}** ({lo('ratio_p50'):.2f}–{hi('ratio_p50'):.2f}) "
          f"| {m('pathexists_p99_us'):.0f} µs | {m('check_p99_us'):.0f} µs | {m('ratio_p99'):.2f} "
          f"| {m('busy_pct'):.0f} % ({lo('busy_pct'):.0f}–{hi('busy_pct'):.0f} %) |")
PY

#!/usr/bin/env bash
# The hand-off under wine: daemon A serves on the named pipes; the Windows bench client
# (crates/bench, windows.rs) runs its phases, and 2 s into its concurrent phase (4 clients, each on
# its own pipe connection, calling filesystem v1 PathExists in a loop) daemon B starts with
# --take-over on the same --state-dir. Prints the client's RESULT lines (max_us: the longest wait
# for one answer, i.e. the longest gap a client saw), how many calls it sent again because their
# connection never sent them (grpc-go's transparent retry; see windows.rs never_sent), and whether A
# handed off and exited 0. Any failed call makes the client exit non-zero.
#
#   scripts/bench-wine-upgrade.sh [RUNS]      (default 3; debug builds, built first)
#
# Uses the test suite's wine prefix (scripts/wine-env.sh) with a fresh wineserver per run.
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
runs="${1:-3}"
# shellcheck source=scripts/wine-env.sh
. "$repo/scripts/wine-env.sh"
export WINEDEBUG=-all
csi_proxy_wine_ready || "$repo/scripts/wine-setup.sh" >&2
winpath() { printf 'Z:%s' "${1//\//\\}"; }
target=x86_64-pc-windows-gnu
tdir="${CARGO_TARGET_DIR:-$repo/target}"
cargo build --target "$target" -p csi-proxy -p csi-proxy-bench >&2 || exit 1
exe="$tdir/$target/debug/csi-proxy.exe"
client="$tdir/$target/debug/csi-proxy-bench.exe"
d="$(mktemp -d "${TMPDIR:-/tmp}/csi-proxy-wine-upgrade.XXXXXX")"
trap '"$WINESERVER" -k >/dev/null 2>&1; rm -rf "$d"' EXIT

status=0
for run in $(seq 1 "$runs"); do
    rm -rf "$d/run" && mkdir -p "$d/run/kubelet/probe" "$d/run/state"
    r="$d/run"
    "$WINESERVER" -k >/dev/null 2>&1; "$WINESERVER" -w >/dev/null 2>&1
    args=("--kubelet-path=$(winpath "$r/kubelet")" "--state-dir=$(winpath "$r/state")")
    "$WINE" "$exe" "${args[@]}" </dev/null >"$r/a.out" 2>"$r/a.err" &
    a=$!
    "$WINE" "$client" --path "$(winpath "$r/kubelet/probe")" --calls 100 --warmup 10 \
        --clients 4 --calls-per-client 4000 >"$r/client.out" 2>"$r/client.err" </dev/null &
    c=$!
    # The third phase (the concurrent one) has begun once its marker is out.
    for _ in $(seq 1 1200); do
        [[ "$(grep -c '^MARK begin' "$r/client.out" 2>/dev/null)" -ge 3 ]] && break
        sleep 0.1
    done
    sleep 2
    "$WINE" "$exe" "${args[@]}" --take-over </dev/null >"$r/b.out" 2>"$r/b.err" &
    b=$!
    wait "$c"; client_rc=$?
    wait "$a"; a_rc=$?
    echo "run $run: client exit $client_rc, old daemon exit $a_rc," \
        "handed off: $(grep -c 'serves alone' "$r/b.err")"
    grep -E '^(RESULT PathExists4|RESENT)' "$r/client.out"
    if [[ $client_rc -ne 0 || $a_rc -ne 0 ]]; then
        status=1
        tail -3 "$r/client.err" "$r/a.err" "$r/b.err"
    fi
    kill "$b" 2>/dev/null; wait "$b" 2>/dev/null
    "$WINESERVER" -k >/dev/null 2>&1
done
exit $status

#!/usr/bin/env bash
# Windows benchmark under wine: latency, throughput and the wineserver requests the daemon makes
# per call, for this tree's daemon and optionally an older one and upstream's, in the same run,
# interleaved.
#
#   scripts/bench-wine.sh                          this tree only
#   scripts/bench-wine.sh --before-commit 43fc68e  also a daemon built from that commit
#   scripts/bench-wine.sh --before OLD.exe [--after NEW.exe]
#   scripts/bench-wine.sh --upstream-src DIR       also upstream's csi-proxy.exe, built from DIR
#   scripts/bench-wine.sh --upstream-exe EXE --go-client EXE   the same, both already built
#
# Options: --rounds N (default 2: before, after, before, after; medians are printed),
# --calls N (sequential calls per timed phase, default 2000), --trace-calls N (per traced phase,
# default 500), --keep-traces DIR (also keeps every run's RESULT and COUNT lines, per daemon),
# --client rust|go (default rust; go with upstream). Prints one Markdown table.
#
# Build: our daemons and the Rust client (crates/bench, `windows.rs`) are built for
# x86_64-pc-windows-gnu with the `bench-wine` profile (the release settings with thin LTO and 16
# codegen units, see the workspace Cargo.toml; an older commit without the profile gets the same
# settings through --config), so both sides of the comparison are built alike.
#
# Upstream: DIR is an extracted upstream csi-proxy source tree, for example
# `git --git-dir=MIRROR archive v1.1.3 | tar -x -C DIR`. Its `cmd/csi-proxy` and our Go client
# (scripts/bench-wine-go-client, added to the tree through `go build -overlay`, so DIR is not
# changed) are built with its vendored modules (`-mod=vendor`, offline) for windows/amd64, by
# scripts/go-client-build.sh (shared with bench-go-linux.sh); Go is installed from Debian
# (apt-get install golang-go) if missing. The Go client calls PathExists
# through upstream's generated client and grpc-go, as drivers do; upstream serves no health
# check, so with `--client go` there is no Check phase. Upstream gets only --kubelet-path.
#
# CPU: in the timed runs a reader of the client's stdout (a FIFO, so it costs nothing while it
# waits) reads the daemon's and wineserver's CPU time from /proc at each MARK line; divided by
# the phase's calls that is CPU per call (clock-tick resolution, 10 ms per phase). It also reads
# how busy the whole machine was over the phase (/proc/stat), to show when times are contended.
#
# Why requests: wine turns every NT call that needs the kernel into a request to wineserver, so
# the requests a call costs stand in for the kernel transitions it costs on Windows, on any machine.
#
# How they are counted. Every daemon runs twice per round in a fresh wineserver of a prefix of its
# own (default $HOME/.csi-proxy-wine-bench, so the test suite's prefix and wineserver are left
# alone): once untraced for the times, once under `wineserver -f -d1`, which writes every request
# to its stderr as `TTTT: name( args )` (TTTT = the wineserver id of the calling thread) and every
# reply as `TTTT: name() = STATUS { ... }`. Tracing slows wineserver down, so no time is taken
# from a traced run. The daemon's threads are found in the trace: the first one is the thread whose
# `init_first_thread( unix_pid=P` carries the unix pid of the wine process we started for the
# daemon; every other one is the `tid` in the reply to a `new_thread` request made by a daemon
# thread for its own process (`process=ffffffff`); a thread leaves the set at its `*killed*` line,
# so a reused id is not counted twice. The client puts markers into the same trace (it creates a
# named pipe `csi-proxy-bench-mark-begin-<phase>` / `...-end-<phase>`, a request that carries the
# name), and the daemon's requests between a phase's markers, divided by the phase's calls, are the
# requests per call. Pipe writes per call are the daemon's `write` requests in the window (a
# WriteFile on a named pipe is one `write` request to wineserver, which owns pipe buffers); the
# threads per phase are the daemon's threads with at least one request per 10 calls in the window.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

rounds=2 calls=2000 trace_calls=500 before="" after="" before_commit="" keep_traces=""
upstream="" upstream_src="" go_client="" client_kind=""
while (($#)); do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --calls) calls="$2"; shift 2 ;;
        --trace-calls) trace_calls="$2"; shift 2 ;;
        --before) before="$2"; shift 2 ;;
        --after) after="$2"; shift 2 ;;
        --before-commit) before_commit="$2"; shift 2 ;;
        --keep-traces) keep_traces="$2"; shift 2 ;;
        --upstream-src) upstream_src="$2"; shift 2 ;;
        --upstream-exe) upstream="$2"; shift 2 ;;
        --go-client) go_client="$2"; shift 2 ;;
        --client) client_kind="$2"; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "bench-wine: unknown argument: $1" >&2; exit 2 ;;
    esac
done

[[ -n "$upstream" || -n "$upstream_src" ]] && client_kind="${client_kind:-go}"
client_kind="${client_kind:-rust}"
case "$client_kind" in
    rust)
        if [[ -n "$upstream" || -n "$upstream_src" ]]; then
            echo "bench-wine: upstream's daemon serves no health check, which the Rust client waits on; use --client go" >&2
            exit 2
        fi ;;
    go)
        if [[ -z "$upstream_src" && -z "$go_client" ]]; then
            echo "bench-wine: --client go needs --upstream-src DIR (to build the Go client) or --go-client EXE" >&2
            exit 2
        fi ;;
    *) echo "bench-wine: --client is rust or go, not $client_kind" >&2; exit 2 ;;
esac

export CSI_PROXY_WINEPREFIX="${CSI_PROXY_BENCH_WINEPREFIX:-${HOME:-/root}/.csi-proxy-wine-bench}"
# shellcheck source=scripts/wine-env.sh
. "$repo/scripts/wine-env.sh"
# Our processes must not raise the server's trace level themselves (+server would), and their
# own debug channels would only add requests.
export WINEDEBUG=-all
csi_proxy_wine_ready || "$repo/scripts/wine-setup.sh" >&2

target=x86_64-pc-windows-gnu
profile_cfg=(--config 'profile.bench-wine.inherits="release"'
    --config 'profile.bench-wine.lto="thin"' --config 'profile.bench-wine.codegen-units=16')
tdir="${CARGO_TARGET_DIR:-$repo/target}"
work="$(mktemp -d "${TMPDIR:-/tmp}/csi-proxy-bench-wine.XXXXXX")"
cleanup() {
    "$WINESERVER" -k >/dev/null 2>&1 || true
    if [[ -n "$before_commit" && -d "$work/before-src" ]]; then
        git -C "$repo" worktree remove --force "$work/before-src" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

export CARGO_INCREMENTAL=0
# The Rust client is built only when it is the one used; this tree's daemon unless --after.
packages=()
[[ -z "$after" ]] && packages+=(-p csi-proxy)
[[ "$client_kind" == rust ]] && packages+=(-p csi-proxy-bench)
if ((${#packages[@]})); then
    echo "building ${packages[*]} ($target, profile bench-wine)" >&2
    cargo build --locked --profile bench-wine --target "$target" "${packages[@]}" >&2
fi
after="${after:-$tdir/$target/bench-wine/csi-proxy.exe}"
client="$tdir/$target/bench-wine/csi-proxy-bench.exe"
if [[ -n "$upstream_src" ]]; then
    # shellcheck source=scripts/go-client-build.sh
    . "$repo/scripts/go-client-build.sh"
    go_upstream_ready bench-wine "$upstream_src"
    echo "building upstream's csi-proxy.exe and the Go client from $upstream_src with $(go version)" >&2
    go_upstream_build "$upstream_src" windows -o "$work/upstream-csi-proxy.exe" ./cmd/csi-proxy
    go_client_build "$upstream_src" windows "$work/bench-client.exe" "$work/overlay.json"
    upstream="${upstream:-$work/upstream-csi-proxy.exe}"
    go_client="${go_client:-$work/bench-client.exe}"
fi
[[ "$client_kind" == go ]] && client="$go_client"
if [[ -n "$before_commit" ]]; then
    echo "building the daemon of $before_commit in a temporary worktree" >&2
    git -C "$repo" worktree add --detach "$work/before-src" "$before_commit" >&2
    # A target dir of its own (deleted at exit): sharing ours would rebuild this tree's crates.
    (cd "$work/before-src" && CARGO_TARGET_DIR="$work/before-target" \
        cargo build --locked "${profile_cfg[@]}" --profile bench-wine --target "$target" -p csi-proxy >&2)
    before="$work/before-target/$target/bench-wine/csi-proxy.exe"
fi
for exe in "$after" "$client" ${before:+"$before"} ${upstream:+"$upstream"}; do
    [[ -f "$exe" ]] || { echo "bench-wine: no such binary: $exe" >&2; exit 1; }
done

# A Linux path as wine's Z: drive sees it.
winpath() { printf 'Z:%s' "${1//\//\\}"; }

# The daemon of a label, and its arguments (upstream has no --state-dir) for run directory $2.
daemon_cmd() {
    local d="$2"
    case "$1" in
        before) printf '%s\n' "$before" ;;
        after) printf '%s\n' "$after" ;;
        upstream) printf '%s\n' "$upstream" ;;
    esac
    printf '%s\n' "--kubelet-path=$(winpath "$d/kubelet")"
    [[ "$1" == upstream ]] || printf '%s\n' "--state-dir=$(winpath "$d/state")"
}

# Reads the client's stdout from FIFO $1 into file $2 and, at each MARK line, the CPU time of the
# daemon (unix pid $3) and of wineserver ($4) and the machine's busy and total time; at each RESULT
# line prints that phase's CPU per call and how busy the machine was (every process, ours and
# others': near 100 % the times measure the competition for the cores as much as the daemon) as
# an extra `RESULT <phase> cpu_us=.. ws_cpu_us=.. busy_pct=..` line.
cpu_reader() {
    python3 - "$@" <<'PY'
import os, sys
fifo, copy, pids = sys.argv[1], sys.argv[2], sys.argv[3:]
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
def cpu(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) * tick_us  # utime + stime, all threads
    except (OSError, IndexError, ValueError):
        return None
def machine():
    try:
        f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return (sum(f) - f[3] - f[4]) * tick_us, sum(f) * tick_us  # all but idle and iowait
    except (OSError, ValueError, IndexError):
        return None, None
marks = {}
with open(fifo) as src, open(copy, "w") as dst:
    for line in src:
        dst.write(line)
        dst.flush()
        f = line.split()
        if len(f) == 3 and f[0] == "MARK":
            marks[(f[1], f[2])] = [cpu(p) for p in pids] + list(machine())
        elif len(f) > 2 and f[0] == "RESULT":
            b, e = marks.get(("begin", f[1])), marks.get(("end", f[1]))
            n = int(f[2].split("=")[1])
            if b and e and n and None not in b + e:
                d, w = ((e[i] - b[i]) / n for i in range(2))
                busy = 100 * (e[2] - b[2]) / max(e[3] - b[3], 1)
                print(f"RESULT {f[1]} cpu_us={d:.1f} ws_cpu_us={w:.1f} busy_pct={busy:.0f}")
PY
}

# Starts a fresh wineserver (traced when $2 names a file), runs one daemon (of label $1) and the
# client, stops both. Appends the client's RESULT lines and, for an untraced run, the CPU per call,
# or for a traced run the per-phase counts, to $out.
run_once() {
    local label="$1" trace="$2" out="$3" ccalls="$4"
    "$WINESERVER" -k >/dev/null 2>&1 || true
    "$WINESERVER" -w >/dev/null 2>&1 || true
    if [[ -n "$trace" ]]; then
        "$WINESERVER" -f -p -d1 2>"$trace" &
    else
        "$WINESERVER" -f -p 2>/dev/null &
    fi
    local ws=$!
    local d="$work/run"
    rm -rf "$d" && mkdir -p "$d/kubelet/probe" "$d/state"
    local cmd
    mapfile -t cmd < <(daemon_cmd "$label" "$d")
    # Started with `exec` in a subshell so $! is the wine process itself, whose unix pid the
    # daemon's first thread reports in init_first_thread.
    (exec "$WINE" "${cmd[@]}" </dev/null >"$d/daemon.out" 2>"$d/daemon.err") &
    local daemon=$!
    local reader="" sink="$d/client.out"
    if [[ -z "$trace" ]]; then
        sink="$d/client.fifo"
        mkfifo "$d/client.fifo"
        cpu_reader "$d/client.fifo" "$d/client.out" "$daemon" "$ws" >"$d/cpu.out" &
        reader=$!
    fi
    if ! "$WINE" "$client" --path "$(winpath "$d/kubelet/probe")" --calls "$ccalls" \
        >"$sink" 2>"$d/client.err" </dev/null; then
        echo "bench-wine: the client failed against ${cmd[0]}:" >&2
        [[ -z "$reader" ]] || wait "$reader" || true
        cat "$d/client.err" "$d/daemon.err" >&2
        exit 1
    fi
    [[ -z "$reader" ]] || wait "$reader"
    grep '^RESULT ' "$d/client.out" >>"$out"
    [[ -z "$reader" ]] || cat "$d/cpu.out" >>"$out"
    "$WINESERVER" -k >/dev/null 2>&1 || true
    wait "$daemon" 2>/dev/null || true
    wait "$ws" 2>/dev/null || true
    if [[ -n "$trace" ]]; then
        python3 - "$trace" "$daemon" "$d/client.out" >>"$out" <<'PY'
import collections, re, sys
trace, upid, client_out = sys.argv[1], sys.argv[2], sys.argv[3]
calls = {}
for line in open(client_out):
    if line.startswith("RESULT "):
        f = line.split()
        calls[f[1]] = int(f[2].split("=")[1])
req = re.compile(r"^([0-9a-f]{4,8}): ([a-z0-9_]+)\( ")
rep = re.compile(r"^([0-9a-f]{4,8}): new_thread\(\) = 0 \{ tid=([0-9a-f]+)")
killed = re.compile(r"^([0-9a-f]{4,8}): \*killed\*")
mark = re.compile(r'csi-proxy-bench-mark-(begin|end)-([A-Za-z0-9]+)"')
daemon, pending = set(), set()
phase, counts, seen = None, {}, set()
by_thread = collections.defaultdict(collections.Counter)
with open(trace, errors="replace") as f:
    for line in f:
        m = req.match(line)
        if m:
            tid, name = m.groups()
            if name == "init_first_thread" and f"unix_pid={upid}," in line:
                daemon.add(tid)
            elif name == "create_named_pipe":
                mk = mark.search(line)
                if mk:
                    phase = mk.group(2) if mk.group(1) == "begin" else None
                    if phase:
                        seen.add(phase)
                        counts[phase] = collections.Counter()
                    continue
            if tid in daemon:
                if name == "new_thread" and "process=ffffffff" in line:
                    pending.add(tid)
                if phase:
                    counts[phase][name] += 1
                    by_thread[phase][tid] += 1
            continue
        m = rep.match(line)
        if m and m.group(1) in pending:
            pending.discard(m.group(1))
            daemon.add(m.group(2))
            continue
        m = killed.match(line)
        if m:
            daemon.discard(m.group(1))
if not daemon and not counts:
    sys.exit(f"bench-wine: no thread of unix pid {upid} in the trace")
for p in sorted(seen):
    n = calls.get(p)
    if not n:
        continue
    c = counts[p]
    names = " ".join(f"{k}={v / n:.2f}" for k, v in c.most_common())
    # Threads that take part in the calls (at least one request per 10 calls), not the idle ones.
    busy = sum(1 for v in by_thread[p].values() if v >= n / 10)
    print(f"COUNT {p} total={sum(c.values()) / n:.2f} threads={busy} {names}")
PY
        if [[ -n "$keep_traces" ]]; then
            mkdir -p "$keep_traces" && mv "$trace" "$keep_traces/"
        else
            rm -f "$trace"
        fi
    fi
}

labels=()
[[ -n "$before" ]] && labels+=(before)
labels+=(after)
[[ -n "$upstream" ]] && labels+=(upstream)
for ((r = 1; r <= rounds; r++)); do
    for label in "${labels[@]}"; do
        echo "round $r: $label (timed)" >&2
        run_once "$label" "" "$work/$label.results" "$calls"
        echo "round $r: $label (traced)" >&2
        run_once "$label" "$work/trace-$label-$r.txt" "$work/$label.counts" "$trace_calls"
    done
done

if [[ -n "$keep_traces" ]]; then
    mkdir -p "$keep_traces" && cp "$work"/*.results "$work"/*.counts "$keep_traces/"
fi

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $("$WINE" --version)"
echo "daemons: after=$after${before:+, before=$before}${upstream:+, upstream=$upstream}; $rounds round(s), medians; $calls calls per timed phase, $trace_calls per traced phase"
echo "client: $client_kind ($client)$([[ "$client_kind" == go ]] && command -v go >/dev/null && echo ", $(go version)")"
echo
python3 - "$work" "${labels[@]}" <<'PY'
import collections, statistics, sys
work, labels = sys.argv[1], sys.argv[2:]
def load(path, prefix):
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    try:
        for line in open(path):
            f = line.split()
            if f[0] != prefix:
                continue
            for kv in f[2:]:
                k, v = kv.split("=")
                runs[f[1]][k].append(float(v))
    except FileNotFoundError:
        pass
    return runs
res = {l: load(f"{work}/{l}.results", "RESULT") for l in labels}
cnt = {l: load(f"{work}/{l}.counts", "COUNT") for l in labels}
def med(d, phase, key):
    v = d.get(phase, {}).get(key)
    return statistics.median(v) if v else None
# Ratio columns: this tree's daemon against each other one.
ratios = [(o, n) for o, n in [("before", "after/before"), ("upstream", "ours/upstream")] if o in labels]
rows = []
def row(what, vals, fmt):
    if all(v is None for v in vals):
        return  # a phase no client in this run has (the Go client makes no health check)
    cells = [fmt(v) if v is not None else "n/a" for v in vals]
    a = vals[labels.index("after")]
    for o, _ in ratios:
        b = vals[labels.index(o)]
        cells.append(f"{a / b:.2f}" if a is not None and b else "n/a")
    rows.append([what] + cells)
def cpu_rows(phase, title):
    row(f"daemon CPU per {title}", [med(res[l], phase, "cpu_us") for l in labels], us)
    row(f"wineserver CPU per {title} (both sides' requests)", [med(res[l], phase, "ws_cpu_us") for l in labels], us)
    row(f"machine busy during {title} (all processes)", [med(res[l], phase, "busy_pct") for l in labels], lambda v: f"{v:.0f} %")
us = lambda v: f"{v:,.0f} µs"
per_s = lambda v: f"{v:,.0f}/s"
n2 = lambda v: f"{v:.1f}"
for phase, title in [("PathExists", "PathExists 1 client"), ("Check", "health Check 1 client")]:
    row(f"{title} p50", [med(res[l], phase, "p50_us") for l in labels], us)
    row(f"{title} p99", [med(res[l], phase, "p99_us") for l in labels], us)
    row(f"{title} throughput", [med(res[l], phase, "per_s") for l in labels], per_s)
    cpu_rows(phase, title)
eight = next((p for l in labels for p in res[l] if p.startswith("PathExists") and p != "PathExists"), None)
if eight:
    k = eight[len("PathExists"):]
    row(f"PathExists {k} clients p50", [med(res[l], eight, "p50_us") for l in labels], us)
    row(f"PathExists {k} clients p99", [med(res[l], eight, "p99_us") for l in labels], us)
    row(f"PathExists {k} clients throughput", [med(res[l], eight, "per_s") for l in labels], per_s)
    cpu_rows(eight, f"PathExists, {k} clients")
for phase, title in [("PathExists", "PathExists"), ("Check", "health Check")] + ([(eight, f"PathExists, {eight[10:]} clients")] if eight else []):
    if not any(phase in cnt[l] for l in labels):
        continue
    row(f"**wineserver requests by the daemon per {title}**", [med(cnt[l], phase, "total") for l in labels], n2)
    row(f"daemon threads making them (>= 1 request per 10 calls), {title}", [med(cnt[l], phase, "threads") for l in labels], lambda v: f"{v:.0f}")
    row(f"pipe writes (`write` requests) per {title}", [med(cnt[l], phase, "write") or 0.0 for l in labels], n2)
    if phase == eight:
        continue
    names = collections.Counter()
    for l in labels:
        for k, v in cnt[l].get(phase, {}).items():
            if k not in ("total", "threads"):
                names[k] = max(names[k], statistics.median(v))
    # Upstream's Go runtime makes requests ours does not: show more of them side by side.
    for k, m in names.most_common(12 if "upstream" in labels else 8):
        if k != "write" and m >= 0.05:
            row(f"of which `{k}` per {title}", [med(cnt[l], phase, k) or 0.0 for l in labels], n2)
head = ["figure"] + labels + [n for _, n in ratios]
print("| " + " | ".join(head) + " |")
print("|" + "|".join("---" for _ in head) + "|")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY

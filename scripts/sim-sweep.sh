#!/usr/bin/env bash
# Explores seeds of the deterministic simulation that nobody has run: N seeds from a random
# first seed (or the one given), in release mode, each through every world (the simulated
# Windows with block drivers, the fake Linux, the simulated Windows with csi-driver-smb).
#
# Usage: scripts/sim-sweep.sh [N] [FIRST_SEED]
#
#   N           seeds to run (default 1000)
#   FIRST_SEED  the first of them (default: drawn from /dev/urandom)
#   SIM_SWEEP_JOBS=J (environment)  runs the seeds as J consecutive ranges at once (default 1).
#               A seed spends most of its time waiting (hung calls, restarts), not computing,
#               so ranges run side by side scale almost linearly, even on a busy machine.
#
# Prints the first seed, then every failing seed with its violation, its shortest failing step
# list and the line that replays it, then the run's figures (seeds per second, steps, attempts,
# hangs, restarts). Exits 1 if any seed failed. It adds nothing to the suite: CI keeps its fixed
# seeds; a seed found here goes into REGRESSIONS in crates/csi-proxy/tests/simulation.rs with
# its fix. Run it niced on a shared machine: nice -n 10 scripts/sim-sweep.sh 10000
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

COUNT="${1:-1000}"
FIRST="${2:-$(( $(od -An -N4 -tu4 /dev/urandom | tr -d ' ') % 4000000000 + 1000 ))}"
case "$COUNT$FIRST" in
    *[!0-9]*) echo "usage: $0 [N] [FIRST_SEED] (numbers)" >&2; exit 2 ;;
esac

JOBS="${SIM_SWEEP_JOBS:-1}"
case "$JOBS" in ''|*[!0-9]*|0) echo "SIM_SWEEP_JOBS must be a positive number" >&2; exit 2 ;; esac
echo "sim-sweep: $COUNT seeds from first seed $FIRST (last $((FIRST + COUNT - 1))), $JOBS at once"
# Only the simulation's test binary is built (the other tests of the crate are not needed).
cargo test -q -p csi-proxy --release --test simulation --no-run
LOGS="$(mktemp -d "${TMPDIR:-/tmp}/sim-sweep.XXXXXX")"
trap 'rm -rf "$LOGS"' EXIT
started=$SECONDS
# Every failure is reported (the test stops after 5 by default), each shrunk to its shortest
# step list. Range j gets seeds [FIRST + j*COUNT/JOBS, FIRST + (j+1)*COUNT/JOBS).
pids=()
for ((j = 0; j < JOBS; j++)); do
    from=$((FIRST + j * COUNT / JOBS))
    to=$((FIRST + (j + 1) * COUNT / JOBS))
    [ "$to" -gt "$from" ] || continue
    DST_SEEDS=$((to - from)) DST_FIRST_SEED="$from" DST_MAX_FAILURES="$COUNT" \
        cargo test -q -p csi-proxy --release --test simulation \
        seeded_node_lifetimes_keep_every_invariant -- --exact --nocapture \
        >"$LOGS/$j.log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done

# A failure is its "seed N failed" line and the indented lines under it (step list, violation,
# replay); the figures are the summary lines, one pair per range.
for log in "$LOGS"/*.log; do
    awk '/^seed [0-9]+ failed/ { on = 1; print; next }
         on && /^  / { print; next }
         { on = 0 }
         / seeds in .* seeds\/s/ || /^resources:/ { print }' "$log"
done
echo "sim-sweep: $COUNT seeds in $((SECONDS - started)) s of wall time"
if [ "$status" -ne 0 ]; then
    if ! grep -q '^seed [0-9]* failed' "$LOGS"/*.log; then
        echo "sim-sweep: the run failed without a failing seed; its output:" >&2
        tail -n 40 "$LOGS"/*.log >&2
    fi
    echo "sim-sweep: FAILED (first seed $FIRST, $COUNT seeds)"
    exit 1
fi
echo "sim-sweep: all $COUNT seeds passed (first seed $FIRST)"

#!/usr/bin/env bash
# The csi-proxy test command: installs what the tests need, then lints and tests the workspace
# for Linux and for Windows (cross-built with mingw, run under wine).
#
# Usage: scripts/test.sh [STEP...]
#
#   With no STEP, runs every step in order and stops at the first failure:
#     install         apt packages, rustup components and the Windows target (skipped if present)
#     wine-setup      wine prefix with the bcryptprimitives.dll shim (scripts/wine-setup.sh)
#     fmt             cargo fmt --all -- --check
#     docs            every relative link in the Markdown files leads somewhere (scripts/check-links.py),
#                     and docs/architecture.md's RPC-to-OS-call table names real functions
#                     (scripts/check-architecture.py)
#     clippy          cargo clippy --workspace --all-targets -- -D warnings
#     clippy-windows  the same for --target x86_64-pc-windows-gnu
#     test            cargo test --workspace (Linux; as root, with loop devices and mounts)
#     test-windows    cargo test --target x86_64-pc-windows-gnu -p csi-proxy-core
#                     -p csi-proxy-formats -p csi-proxy-host -p csi-proxy-server, and the daemon's unit tests
#                     (-p csi-proxy --bin csi-proxy), run under wine
#     manifests       deploy/ manifests against Kubernetes' own schemas (kubernetes-validate from
#                     PyPI, in a venv) and the systemd unit through systemd-analyze verify
#     release         scripts/release.sh packs both archives from debug builds, then
#                     scripts/check-release.py checks their files, sums and version lines, and
#                     that the Containerfile and the HostProcess DaemonSet agree
#     fuzz-smoke      the fuzz corpus and regressions replayed (cargo test in fuzz/), then each
#                     cargo-fuzz target for FUZZ_SMOKE_SECONDS (default 10) on stable
#                     (scripts/fuzz.sh; installs cargo-fuzz if missing)
#   With STEPs, runs only those, in the order given.
#
# Environment:
#   SKIP_INSTALL=1   skip the install step (nothing is installed or downloaded)
#   CI=true          CI mode: cargo runs with --locked, without colour and without incremental
#                    state (CARGO_INCREMENTAL=0: a clean clone builds once)
#   CSI_PROXY_WINEPREFIX   wine prefix (default $HOME/.csi-proxy-wine)
#
# Meant for a Debian 12 machine with rustup and cargo, run as root (the Linux integration tests
# need root; the install step uses apt-get). Exit status: 0 when every step passed, else 1
# (2 for a usage error).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

WINDOWS_TARGET=x86_64-pc-windows-gnu
# Where cargo builds.
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
APT_PACKAGES=(
    gcc libc6-dev                          # linker for the host target
    gcc-mingw-w64-x86-64                   # linker for x86_64-pc-windows-gnu, builds the wine shim
    wine wine64                            # runs the Windows test binaries
    xfsprogs btrfs-progs e2fsprogs         # mkfs/grow tools used by the Linux volume tests
    dbus-daemon                            # a private bus for the systemd service-control tests
    util-linux                             # losetup, mount, flock
    tgt                                    # userspace iSCSI target (tgtd) for the iSCSI tests
    open-iscsi                             # iscsiadm: iSCSI login tests (run where iscsi_tcp exists)
    python3-venv                           # a venv for kubernetes-validate (manifests step)
    systemd                                # systemd-analyze verify (manifests step)
    # The foreign-content matrix (foreign_content_e2e): content made by the real tools.
    # (md members and ZFS labels are crafted: mdadm and zpool need kernel drivers CI lacks).
    cryptsetup-bin lvm2 f2fs-tools dosfstools exfatprogs ntfs-3g nilfs-tools bcache-tools
)
# Installed without their recommends: lvm2's and bcache-tools' pull in an initramfs generator
# no test uses.
APT_NO_RECOMMENDS=(cryptsetup-bin lvm2 f2fs-tools dosfstools exfatprogs ntfs-3g nilfs-tools bcache-tools)
ALL_STEPS=(install wine-setup fmt docs clippy clippy-windows test test-windows manifests release fuzz-smoke)

usage() { sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; }

steps=()
for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
        --list) printf '%s\n' "${ALL_STEPS[@]}"; exit 0 ;;
        *)
            if [[ " ${ALL_STEPS[*]} " != *" $arg "* ]]; then
                echo "test.sh: unknown step '$arg' (steps: ${ALL_STEPS[*]})" >&2
                exit 2
            fi
            steps+=("$arg")
            ;;
    esac
done
(( ${#steps[@]} )) || steps=("${ALL_STEPS[@]}")

CARGO_FLAGS=()
if [[ "${CI:-}" == "true" ]]; then
    CARGO_FLAGS+=(--locked)
    export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
    # A clean clone builds once: incremental state would only double the object files on disk.
    export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

# ---------------------------------------------------------------------------------------------

as_root() {
    if (( EUID == 0 )); then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "test.sh: need root for: $*" >&2
        return 1
    fi
}

step_install() {
    local missing=() pkg
    for pkg in "${APT_PACKAGES[@]}"; do
        if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" != installed ]]; then
            missing+=("$pkg")
        fi
    done
    if (( ${#missing[@]} )); then
        echo "installing: ${missing[*]}"
        as_root apt-get update
        local plain=() bare=()
        for pkg in "${missing[@]}"; do
            if [[ " ${APT_NO_RECOMMENDS[*]} " == *" $pkg "* ]]; then bare+=("$pkg"); else plain+=("$pkg"); fi
        done
        if (( ${#plain[@]} )); then
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${plain[@]}"
        fi
        if (( ${#bare[@]} )); then
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${bare[@]}"
        fi
    else
        echo "apt packages present: ${APT_PACKAGES[*]}"
    fi

    command -v rustup >/dev/null 2>&1 || { echo "test.sh: rustup is required" >&2; return 1; }
    local installed
    installed="$(rustup component list --installed)"
    local comp
    for comp in rustfmt clippy; do
        if ! grep -q "^$comp" <<<"$installed"; then
            rustup component add "$comp"
        fi
    done
    if ! rustup target list --installed | grep -qx "$WINDOWS_TARGET"; then
        rustup target add "$WINDOWS_TARGET"
    fi
    echo "rust: $(rustc --version); components rustfmt, clippy; target $WINDOWS_TARGET"
}

step_wine_setup() {
    "$ROOT/scripts/wine-setup.sh"
}

step_fmt() {
    cargo fmt --all -- --check
}

step_docs() {
    python3 "$ROOT/scripts/check-links.py"
    python3 "$ROOT/scripts/check-architecture.py"
}

step_clippy() {
    cargo clippy "${CARGO_FLAGS[@]}" --workspace --all-targets -- -D warnings
}

step_clippy_windows() {
    cargo clippy "${CARGO_FLAGS[@]}" --workspace --all-targets --target "$WINDOWS_TARGET" \
        -- -D warnings
}

step_test() {
    # --no-fail-fast: run every test binary, so one run shows every failure (still exit != 0).
    cargo test "${CARGO_FLAGS[@]}" --no-fail-fast --workspace
}

step_test_windows() {
    # The runner in .cargo/config.toml (scripts/wine-run.sh) runs each test binary under wine.
    cargo test "${CARGO_FLAGS[@]}" --no-fail-fast --target "$WINDOWS_TARGET" \
        -p csi-proxy-core -p csi-proxy-formats -p csi-proxy-host -p csi-proxy-server
    # The daemon's own unit tests: the log file rotation renames the open file, which Windows
    # allows only through std's FILE_SHARE_DELETE; the Event Log messages.
    cargo test "${CARGO_FLAGS[@]}" --no-fail-fast --target "$WINDOWS_TARGET" \
        -p csi-proxy --bin csi-proxy
}

step_manifests() {
    # Kubernetes' schemas as the kubernetes-validate package ships them (no cluster needed).
    local venv="${CSI_PROXY_VENV:-$HOME/.csi-proxy-venv}"
    if [[ ! -x "$venv/bin/kubernetes-validate" ]]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet "kubernetes-validate>=1.30"
    fi
    "$venv/bin/kubernetes-validate" --strict deploy/linux/*.yaml deploy/windows/*.yaml
    # The unit as shipped, with ExecStart pointing at the binary just built (verify also checks
    # that the executable exists).
    cargo build "${CARGO_FLAGS[@]}" -p csi-proxy
    local dir
    dir="$(mktemp -d)"
    sed "s#/usr/local/bin/csi-proxy#$TARGET_DIR/debug/csi-proxy#" \
        deploy/linux/csi-proxy.service \
        > "$dir/csi-proxy.service"
    cp deploy/linux/csi-proxy.socket "$dir/"
    local out rc=0
    out="$(systemd-analyze verify "$dir/csi-proxy.socket" "$dir/csi-proxy.service" 2>&1)" || rc=$?
    rm -rf "$dir"
    # verify also reports on units the files refer to that this machine lacks; only lines about
    # csi-proxy's own units (an unknown key, a bad value) count, and it exits 0 for those.
    if [[ $rc -ne 0 ]] || grep -q 'csi-proxy\.\(service\|socket\)' <<<"$out"; then
        echo "$out" >&2
        return 1
    fi
    echo "deploy/linux/csi-proxy.service and csi-proxy.socket verified"
}

step_release() {
    # Debug builds (the release profile's fat LTO would double CI's time); the archives' layout,
    # sums and version lines are the same.
    local dist
    dist="$(mktemp -d)"
    "$ROOT/scripts/release.sh" --profile dev --allow-dirty --out "$dist"
    python3 "$ROOT/scripts/check-release.py" "$dist"
    rm -rf "$dist"
}

step_fuzz_smoke() {
    # The fuzz crate is its own workspace (libFuzzer needs nightly flags, which fuzz.sh enables
    # on stable with RUSTC_BOOTSTRAP=1). The smoke run works on a copy of the corpus, and an
    # unoptimised build (FUZZ_DEV=1) keeps its build time to a few minutes.
    cargo test "${CARGO_FLAGS[@]}" --manifest-path fuzz/Cargo.toml
    FUZZ_CORPUS_RO=1 FUZZ_DEV="${FUZZ_DEV:-1}" "$ROOT/scripts/fuzz.sh" "${FUZZ_SMOKE_SECONDS:-10}"
}

# ---------------------------------------------------------------------------------------------

declare -a results=()
start_all=$SECONDS

fmt_duration() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# Free space where cargo writes, in GiB: printed before each step and with a failure, because a
# full disk shows up as a linker crash (a Bus error in ld) rather than as "no space left".
disk_free() {
    local dir="$TARGET_DIR"
    [[ -d "$dir" ]] || dir="$ROOT"
    df -P -BG "$dir" 2>/dev/null | awk 'NR == 2 { sub(/G$/, "", $4); print $4 "G free on " $6 }'
}

# In CI, the test executables a step linked (most of the build's disk) are removed once the step
# has passed: no later step runs them, and a later `cargo build` relinks the two daemons it needs.
# This keeps the run's peak disk at the `test` step instead of the sum of every step.
prune_after() {
    [[ "${CI:-}" == "true" ]] || return 0
    local deps
    case "$1" in
        test) deps="$TARGET_DIR/debug/deps" ;;
        test-windows) deps="$TARGET_DIR/$WINDOWS_TARGET/debug/deps" ;;
        *) return 0 ;;
    esac
    [[ -d "$deps" ]] || return 0
    find "$deps" -maxdepth 1 -type f -executable ! -name '*.so' ! -name '*.dll' -delete
    echo "removed the executables of step '$1' from $deps ($(disk_free))"
}

summary() {
    local line
    echo
    echo "==================================================================================="
    echo " csi-proxy test summary ($(fmt_duration $((SECONDS - start_all))) total)"
    echo "==================================================================================="
    for line in "${results[@]}"; do
        echo "  $line"
    done
}

for step in "${steps[@]}"; do
    if [[ "$step" == install && "${SKIP_INSTALL:-}" == 1 ]]; then
        results+=("$(printf '%-15s %-7s %s' "$step" SKIPPED "(SKIP_INSTALL=1)")")
        continue
    fi
    echo
    echo "==================================================================================="
    echo " ==> $step   ($(disk_free))"
    echo "==================================================================================="
    t0=$SECONDS
    # A subshell outside any `||`/`if` context, so that `set -e` applies inside the step.
    set +e
    (
        set -e
        "step_${step//-/_}"
    )
    rc=$?
    set -e
    took=$(fmt_duration $((SECONDS - t0)))
    if (( rc != 0 )); then
        results+=("$(printf '%-15s %-7s %s' "$step" FAILED "$took (exit $rc)")")
        summary
        echo
        echo "FAILED at step '$step' (exit $rc); disk: $(disk_free)"
        exit 1
    fi
    results+=("$(printf '%-15s %-7s %s' "$step" ok "$took")")
    prune_after "$step"
done

summary
echo
echo "ALL STEPS PASSED"

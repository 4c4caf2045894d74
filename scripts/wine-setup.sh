#!/usr/bin/env bash
# Prepare the wine prefix that runs x86_64-pc-windows-gnu test binaries (idempotent).
#
#   scripts/wine-setup.sh           create the prefix if needed, (re)build and install the shim
#   scripts/wine-setup.sh --force   delete and recreate the prefix
#
# Needs: wine64 (Debian: wine + wine64) and x86_64-w64-mingw32-gcc (gcc-mingw-w64-x86-64).
# No X display is needed. See scripts/wine-env.sh for the environment it honours.
set -euo pipefail

# shellcheck source=scripts/wine-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/wine-env.sh"

force=0
case "${1:-}" in
    --force) force=1 ;;
    "") ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "wine-setup: unknown argument: $1" >&2; exit 2 ;;
esac

log() { echo "wine-setup: $*" >&2; }
die() { echo "wine-setup: error: $*" >&2; exit 1; }

[[ -n "$WINE" && -x "$WINE" ]] || die "no wine64 loader found (apt-get install wine wine64)"
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 \
    || die "x86_64-w64-mingw32-gcc not found (apt-get install gcc-mingw-w64-x86-64)"

mkdir -p "$(dirname "$WINEPREFIX")"
# Serialise concurrent set-ups (the runner calls this script on first use).
exec 9>"$WINEPREFIX.lock"
flock 9

if (( force )) && [[ -d "$WINEPREFIX" ]]; then
    log "removing $WINEPREFIX"
    "$WINESERVER" -k >/dev/null 2>&1 || true
    rm -rf "$WINEPREFIX"
fi

if csi_proxy_wine_ready; then
    log "prefix $WINEPREFIX is ready"
    exit 0
fi

if [[ ! -f "$WINEPREFIX/system.reg" ]]; then
    log "creating prefix $WINEPREFIX with $WINE ($("$WINE" --version 2>/dev/null || echo unknown))"
    # wine refuses a prefix owned by another user; create it as whoever runs the tests.
    "$WINE" wineboot --init >/dev/null 2>&1 || die "wineboot --init failed (rerun with WINEDEBUG=err+all)"
    # wineboot returns before the registry is flushed; wait for the server to finish.
    "$WINESERVER" -w
    [[ -f "$WINEPREFIX/system.reg" ]] || die "wineboot did not create $WINEPREFIX/system.reg"
fi

[[ -d "$WINEPREFIX/drive_c/windows/system32" ]] || die "prefix has no drive_c/windows/system32"

log "building bcryptprimitives.dll shim (ProcessPrng -> RtlGenRandom)"
build_dir="$(mktemp -d)"
trap 'rm -rf "$build_dir"' EXIT
x86_64-w64-mingw32-gcc -shared -O2 -Wall -Wextra -Werror -static-libgcc \
    -o "$build_dir/bcryptprimitives.dll" \
    "$CSI_PROXY_SHIM_SRC/bcryptprimitives.c" "$CSI_PROXY_SHIM_SRC/bcryptprimitives.def" \
    -ladvapi32
install -m 0644 "$build_dir/bcryptprimitives.dll" "$CSI_PROXY_SHIM_DLL"
csi_proxy_shim_hash >"$CSI_PROXY_SHIM_STAMP"
log "installed $CSI_PROXY_SHIM_DLL"
log "prefix $WINEPREFIX is ready"

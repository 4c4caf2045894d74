# shellcheck shell=bash
# Shared settings for the wine prefix used to run x86_64-pc-windows-gnu test binaries.
# Sourced by scripts/wine-setup.sh and scripts/wine-run.sh; not meant to be run directly.
#
# Environment:
#   CSI_PROXY_WINEPREFIX  wine prefix to use (default: $HOME/.csi-proxy-wine)
#   CSI_PROXY_WINE        wine loader to use (default: /usr/lib/wine/wine64, else wine64, else wine)

CSI_PROXY_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

export WINEPREFIX="${CSI_PROXY_WINEPREFIX:-${HOME:-/root}/.csi-proxy-wine}"
# Quiet wine: no fixme/err chatter mixed into test output.
export WINEDEBUG="${WINEDEBUG:--all}"
# Never offer to download wine-mono/wine-gecko (they would need a display and the network).
export WINEDLLOVERRIDES="${WINEDLLOVERRIDES:-mscoree,mshtml=}"
# Headless: wine needs no X server for console programs. An inherited DISPLAY would only make
# wineboot pop up dialogs.
unset DISPLAY WAYLAND_DISPLAY

# Debian installs the 64-bit loader as /usr/lib/wine/wine64; /usr/bin/wine is a wrapper script
# that looks for the 32-bit loader first and prints a "wine32 is missing" hint.
if [[ -n "${CSI_PROXY_WINE:-}" ]]; then
    WINE="$CSI_PROXY_WINE"
elif [[ -x /usr/lib/wine/wine64 ]]; then
    WINE=/usr/lib/wine/wine64
elif command -v wine64 >/dev/null 2>&1; then
    WINE="$(command -v wine64)"
else
    WINE="$(command -v wine || true)"
fi
export WINELOADER="${WINELOADER:-$WINE}"

if [[ -x /usr/lib/wine/wineserver64 ]]; then
    WINESERVER=/usr/lib/wine/wineserver64
elif [[ -x /usr/lib/wine/wineserver ]]; then
    WINESERVER=/usr/lib/wine/wineserver
else
    WINESERVER="$(command -v wineserver || true)"
fi
# wine itself looks the server up through this variable too.
export WINESERVER

CSI_PROXY_SHIM_SRC="$CSI_PROXY_REPO_ROOT/tools/wine-shim"
CSI_PROXY_SHIM_DLL="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
# Records which shim sources the installed DLL was built from.
CSI_PROXY_SHIM_STAMP="$WINEPREFIX/.csi-proxy-shim.sha256"

csi_proxy_shim_hash() {
    cat "$CSI_PROXY_SHIM_SRC/bcryptprimitives.c" "$CSI_PROXY_SHIM_SRC/bcryptprimitives.def" \
        | sha256sum | cut -d' ' -f1
}

# True when the prefix exists and carries the current shim.
csi_proxy_wine_ready() {
    [[ -f "$WINEPREFIX/system.reg" && -f "$CSI_PROXY_SHIM_DLL" && -f "$CSI_PROXY_SHIM_STAMP" ]] \
        && [[ "$(cat "$CSI_PROXY_SHIM_STAMP")" == "$(csi_proxy_shim_hash)" ]]
}

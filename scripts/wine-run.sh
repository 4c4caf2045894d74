#!/usr/bin/env bash
# Cargo runner for x86_64-pc-windows-gnu (see .cargo/config.toml): runs a Windows binary under
# wine in the prefix prepared by scripts/wine-setup.sh, creating it on first use.
# The binary's exit code is wine's exit code (so `cargo test` sees failures).
set -euo pipefail

# shellcheck source=scripts/wine-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/wine-env.sh"

if ! csi_proxy_wine_ready; then
    "$CSI_PROXY_REPO_ROOT/scripts/wine-setup.sh" >&2
fi

[[ -n "$WINE" && -x "$WINE" ]] || { echo "wine-run: no wine64 loader found" >&2; exit 127; }
exec "$WINE" "$@"

#!/usr/bin/env bash
# Builds csi-proxy's release artifacts from a clean checkout: one archive per platform, each
# holding the daemon, csi-proxy-ctl, what installs them and the manifests, and SHA256SUMS over
# both. The binaries report the version and the commit they were built from (`--version`).
#
# Usage: scripts/release.sh [--out DIR] [--profile PROFILE] [--allow-dirty]
#
#   --out DIR        where the archives and SHA256SUMS go (default: dist/, emptied first)
#   --profile NAME   cargo profile (default: release). CI packs `dev` builds to check the
#                    archives' layout without two release builds.
#   --allow-dirty    build from a checkout with changes not committed; the version line then
#                    says "-dirty" (never publish such a build)
#
# Produces, for version V (Cargo.toml's) built at commit C:
#   csi-proxy-V-linux-amd64.tar.gz    csi-proxy, csi-proxy-ctl, csi-proxy.service, .socket,
#                                     node-plugin-daemonset.yaml, README.md, docs/, VERSION
#   csi-proxy-V-windows-amd64.zip     csi-proxy.exe, csi-proxy-ctl.exe, install.ps1,
#                                     csi-proxy-hostprocess.yaml, node-plugin-daemonset.yaml,
#                                     Containerfile, README.md, docs/, VERSION
#   SHA256SUMS                        `sha256sum` lines for both archives
# Each archive unpacks into a directory of its own name. The Windows one is also the build
# context of the HostProcess image (deploy/windows/Containerfile says how).
#
# Needs: cargo with the x86_64-pc-windows-gnu target and mingw-w64 (scripts/test.sh's install
# step sets both up), python3, sha256sum, tar, git.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

OUT="$ROOT/dist"
PROFILE=release
ALLOW_DIRTY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT="$(realpath -m "$2")"; shift 2 ;;
        --profile) PROFILE="$2"; shift 2 ;;
        --allow-dirty) ALLOW_DIRTY=1; shift ;;
        -h|--help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "release.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/{s/^version = "\(.*\)"/\1/p}' Cargo.toml)"
[ -n "$VERSION" ] || { echo "release.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
COMMIT="$(git rev-parse HEAD)"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    if [ "$ALLOW_DIRTY" != 1 ]; then
        echo "release.sh: the checkout has uncommitted changes; commit them (or --allow-dirty)" >&2
        exit 1
    fi
    COMMIT="$COMMIT-dirty"
fi
# What both binaries answer to --version (read at compile time, crates/*/src: VERSION).
export CSI_PROXY_RELEASE="$VERSION (commit $COMMIT)"
echo "release.sh: csi-proxy $CSI_PROXY_RELEASE, profile $PROFILE, into $OUT"

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$PROFILE" in dev) PROFILE_DIR=debug ;; *) PROFILE_DIR="$PROFILE" ;; esac
LOCKED=()
[ "${CI:-}" = true ] && LOCKED=(--locked)
cargo build "${LOCKED[@]}" --profile "$PROFILE" -p csi-proxy -p csi-proxy-ctl
cargo build "${LOCKED[@]}" --profile "$PROFILE" --target x86_64-pc-windows-gnu \
    -p csi-proxy -p csi-proxy-ctl
LINUX_BIN="$TARGET_DIR/$PROFILE_DIR"
WINDOWS_BIN="$TARGET_DIR/x86_64-pc-windows-gnu/$PROFILE_DIR"

# The Linux daemon must say what it was built from (the Windows one is the same source and
# environment; it is checked by scripts/check-release.py from its bytes).
reported="$("$LINUX_BIN/csi-proxy" --version)"
case "$reported" in
    *"$CSI_PROXY_RELEASE"*) ;;
    *) echo "release.sh: the daemon reports '$reported', not '$CSI_PROXY_RELEASE'" >&2; exit 1 ;;
esac

rm -rf "$OUT"
mkdir -p "$OUT"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT

# Puts the files common to both archives (the user documentation and the version) into $1.
common() {
    cp README.md "$1/"
    cp -r docs "$1/docs"
    printf 'csi-proxy %s\n' "$CSI_PROXY_RELEASE" >"$1/VERSION"
}

LINUX_NAME="csi-proxy-$VERSION-linux-amd64"
mkdir "$STAGE/$LINUX_NAME"
install -m 0755 "$LINUX_BIN/csi-proxy" "$LINUX_BIN/csi-proxy-ctl" "$STAGE/$LINUX_NAME/"
install -m 0644 deploy/linux/csi-proxy.service deploy/linux/csi-proxy.socket \
    deploy/linux/node-plugin-daemonset.yaml \
    "$STAGE/$LINUX_NAME/"
common "$STAGE/$LINUX_NAME"
# Reproducible metadata: owner root, times of the commit.
STAMP="@$(git log -1 --format=%ct)"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$STAMP" \
    -C "$STAGE" -czf "$OUT/$LINUX_NAME.tar.gz" "$LINUX_NAME"

WINDOWS_NAME="csi-proxy-$VERSION-windows-amd64"
mkdir "$STAGE/$WINDOWS_NAME"
cp "$WINDOWS_BIN/csi-proxy.exe" "$WINDOWS_BIN/csi-proxy-ctl.exe" \
    deploy/windows/install.ps1 deploy/windows/csi-proxy-hostprocess.yaml \
    deploy/windows/node-plugin-daemonset.yaml deploy/windows/Containerfile \
    "$STAGE/$WINDOWS_NAME/"
common "$STAGE/$WINDOWS_NAME"
# Reproducible too: entries sorted, every time the commit's, fixed modes (zip keeps no owner).
python3 - "$STAGE" "$WINDOWS_NAME" "$OUT/$WINDOWS_NAME.zip" "${STAMP#@}" <<'PY'
import os, sys, time, zipfile
stage, top, out, stamp = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
when = time.gmtime(stamp)[:6]
paths = []
for d, dirs, files in os.walk(os.path.join(stage, top)):
    paths += [os.path.join(d, f) for f in files]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for p in sorted(paths, key=lambda p: os.path.relpath(p, stage)):
        info = zipfile.ZipInfo(os.path.relpath(p, stage).replace(os.sep, "/"), when)
        info.external_attr = (0o100755 if os.access(p, os.X_OK) else 0o100644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        with open(p, "rb") as f:
            z.writestr(info, f.read())
PY

(cd "$OUT" && sha256sum "$LINUX_NAME.tar.gz" "$WINDOWS_NAME.zip" >SHA256SUMS)
cat "$OUT/SHA256SUMS"
ls -l "$OUT"
echo "release.sh: done (check with: python3 scripts/check-release.py $OUT)"

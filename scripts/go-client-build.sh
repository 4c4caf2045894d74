# Sourced by scripts/bench-wine.sh and scripts/bench-go-linux.sh: builds in an extracted upstream
# csi-proxy source tree (`git --git-dir=MIRROR archive v1.1.3 | tar -x -C DIR`) with its vendored
# modules, offline, and adds our Go bench client (scripts/bench-wine-go-client) to that tree only
# in the build's view of it (`go build -overlay`), so the tree is not changed and nothing of
# upstream is kept in this repository.

go_client_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bench-wine-go-client"

# go_upstream_ready WHO DIR: DIR is an extracted upstream tree and Go is installed (Debian's
# golang-go through apt-get if missing). WHO names the calling script in messages.
go_upstream_ready() {
    local who="$1" src="$2"
    [[ -f "$src/go.mod" && -d "$src/cmd/csi-proxy" && -d "$src/vendor" ]] || {
        echo "$who: $src is not an extracted upstream csi-proxy source tree (go.mod, cmd/csi-proxy, vendor/)" >&2
        return 1
    }
    command -v go >/dev/null 2>&1 && return 0
    echo "$who: no Go toolchain: installing Debian's golang-go with apt-get (to build in upstream's tree)" >&2
    { apt-get update -qq && apt-get install -y -qq golang-go; } >&2 || {
        echo "$who: could not install golang-go; install Go yourself" >&2
        return 1
    }
}

# go_upstream_build DIR GOOS GO-BUILD-ARGS...: `go build` in upstream tree DIR for GOOS/amd64.
go_upstream_build() {
    local src="$1" goos="$2"
    shift 2
    (cd "$src" && GOOS="$goos" GOARCH=amd64 CGO_ENABLED=0 GOFLAGS=-mod=vendor GOTOOLCHAIN=local \
        go build "$@") >&2
}

# go_client_build DIR GOOS OUT OVERLAY: builds the Go bench client as DIR/cmd/bench-client for
# GOOS into OUT; OVERLAY is where the overlay file is written (a scratch path).
go_client_build() {
    local src overlay="$4"
    src="$(cd "$1" && pwd)"
    python3 - "$src/cmd/bench-client" "$go_client_dir" >"$overlay" <<'PY'
import glob, json, os, sys
dst, ours = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(os.path.join(ours, "*.go")))
print(json.dumps({"Replace": {os.path.join(dst, os.path.basename(f)): f for f in files}}))
PY
    go_upstream_build "$src" "$2" -overlay "$overlay" -o "$3" ./cmd/bench-client
}

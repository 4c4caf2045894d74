#!/usr/bin/env python3
"""Checks that the release pieces agree (CI's `release` step of scripts/test.sh).

Usage: scripts/check-release.py [DIST]

Without DIST, statically: deploy/windows/Containerfile builds without running anything inside
Windows (no RUN), copies the executables to the image's root and starts the daemon; the
HostProcess DaemonSet names one image everywhere and starts an executable the Containerfile
puts at %CONTAINER_SANDBOX_MOUNT_POINT%.

With DIST (what scripts/release.sh wrote), also: SHA256SUMS matches both archives; each
archive unpacks into one directory of its own name holding exactly the expected files; the
Containerfile in the Windows archive finds every file it copies beside it; and both daemons
carry the version line of the archive's VERSION file (the Linux one is run with --version).

Exits 1 naming every disagreement.
"""

import hashlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SANDBOX = "%CONTAINER_SANDBOX_MOUNT_POINT%\\"
DOCS = sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*") if p.is_file()
)
LINUX_FILES = {
    "csi-proxy",
    "csi-proxy-ctl",
    "csi-proxy.service",
    "csi-proxy.socket",
    "node-plugin-daemonset.yaml",
    "README.md",
    "VERSION",
    *DOCS,
}
WINDOWS_FILES = {
    "csi-proxy.exe",
    "csi-proxy-ctl.exe",
    "install.ps1",
    "csi-proxy-hostprocess.yaml",
    "node-plugin-daemonset.yaml",
    "Containerfile",
    "README.md",
    "VERSION",
    *DOCS,
}

problems = []


def problem(text):
    problems.append(text)


def containerfile(text):
    """The Containerfile's instructions as (keyword, argument) pairs, continuations joined."""
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            keyword, _, arg = current.strip().partition(" ")
            lines.append((keyword.upper(), arg.strip()))
            current = ""
    return lines


def copied_to_root(instructions):
    """Files the Containerfile copies to the image's root."""
    files = []
    for keyword, arg in instructions:
        if keyword in ("COPY", "ADD"):
            *sources, dest = arg.split()
            if dest not in ("/", "C:/", "C:\\", "./", "."):
                problem(f"Containerfile: {keyword} {arg}: copies elsewhere than the image root")
            files += [s for s in sources if not s.startswith("--")]
    return files


def check_static():
    text = (ROOT / "deploy/windows/Containerfile").read_text()
    instructions = containerfile(text)
    keywords = [k for k, _ in instructions]
    if "FROM" not in keywords:
        problem("Containerfile: no FROM")
    if "RUN" in keywords:
        problem("Containerfile: RUN needs Windows to build; the image must build on Linux")
    copied = copied_to_root(instructions)
    for name in copied:
        if name not in WINDOWS_FILES:
            problem(f"Containerfile copies {name}, which the Windows archive does not hold")
    entry = [a for k, a in instructions if k == "ENTRYPOINT"]
    if not entry or "csi-proxy.exe" not in entry[-1]:
        problem("Containerfile: the ENTRYPOINT is not csi-proxy.exe")

    manifest = (ROOT / "deploy/windows/csi-proxy-hostprocess.yaml").read_text()
    images = set(re.findall(r"^\s*image:\s*(\S+)", manifest, re.M))
    if len(images) != 1:
        problem(f"csi-proxy-hostprocess.yaml: more than one image name to change: {images}")
    started = re.findall(r"'(%CONTAINER_SANDBOX_MOUNT_POINT%\\[^']+)'", manifest)
    if not started:
        problem("csi-proxy-hostprocess.yaml: nothing started from the image's files")
    for path in started:
        name = path[len(SANDBOX):]
        if name not in copied:
            problem(f"csi-proxy-hostprocess.yaml starts {path}; the Containerfile does not copy {name}")
    for name in ("csi-proxy.service", "csi-proxy.socket", "node-plugin-daemonset.yaml"):
        if not (ROOT / "deploy/linux" / name).is_file():
            problem(f"deploy/linux/{name} is missing")
    check_socket_unit()


def check_socket_unit():
    """csi-proxy.socket binds exactly the sockets csi-proxy.service's daemon serves: its
    directory is --socket-dir, its group --socket-group, one socket per endpoint."""
    service = (ROOT / "deploy/linux/csi-proxy.service").read_text()
    unit = (ROOT / "deploy/linux/csi-proxy.socket").read_text()
    start = re.search(r"^ExecStart=(.*)$", service, re.M).group(1)
    flags = dict(re.findall(r"--([\w-]+)=(\S+)", start))
    listen = re.findall(r"^ListenStream=(\S+)$", unit, re.M)
    dirs = {l.rsplit("/", 1)[0] for l in listen}
    if dirs != {flags.get("socket-dir")}:
        problem(f"csi-proxy.socket listens in {dirs}; the service's --socket-dir is {flags.get('socket-dir')}")
    group = re.search(r"^SocketGroup=(\S+)$", unit, re.M)
    if (group and group.group(1)) != flags.get("socket-group"):
        problem("csi-proxy.socket's SocketGroup= differs from the service's --socket-group")
    registry = (ROOT / "crates/server/src/registry.rs").read_text()
    served = set()
    for g, versions in re.findall(r"group_endpoints!\(list, s\.\w+, (\w+), \[(.*?)\]\);", registry, re.S):
        served |= {f"csi-proxy-{g}-{v}.sock" for v in re.findall(r'=> "(\w+)"', versions)}
    names = {l.rsplit("/", 1)[1] for l in listen}
    if len(served) != 23 or names != served or len(listen) != len(names):
        problem(f"csi-proxy.socket's sockets differ from the endpoints: missing {sorted(served - names)}, extra {sorted(names - served)}")


def members(names, top):
    """The archive's files relative to its one top directory `top`."""
    out = set()
    for name in names:
        if name.endswith("/"):
            continue
        head, _, rest = name.partition("/")
        if head != top or not rest:
            problem(f"{top}: {name} is outside the archive's directory")
            continue
        out.add(rest)
    return out


def compare(kind, found, expected):
    for name in sorted(expected - found):
        problem(f"{kind} archive: {name} is missing")
    for name in sorted(found - expected):
        problem(f"{kind} archive: {name} is not expected")


def check_dist(dist):
    sums = dist / "SHA256SUMS"
    if not sums.is_file():
        problem(f"{sums} is missing")
        return
    archives = {}
    for line in sums.read_text().splitlines():
        digest, _, name = line.partition("  ")
        data = (dist / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            problem(f"SHA256SUMS: {name} does not match")
        archives[name] = data
    linux = [n for n in archives if n.endswith("-linux-amd64.tar.gz")]
    windows = [n for n in archives if n.endswith("-windows-amd64.zip")]
    if len(linux) != 1 or len(windows) != 1:
        problem(f"SHA256SUMS names {sorted(archives)}: not one archive per platform")
        return

    top = linux[0][: -len(".tar.gz")]
    with tarfile.open(fileobj=io.BytesIO(archives[linux[0]])) as tar:
        files = [m.name for m in tar.getmembers() if not m.isdir()]
        compare("Linux", members(files, top), LINUX_FILES)
        version = tar.extractfile(f"{top}/VERSION").read().decode().strip()
        with tempfile.TemporaryDirectory() as tmp:
            binary = Path(tmp) / "csi-proxy"
            binary.write_bytes(tar.extractfile(f"{top}/csi-proxy").read())
            binary.chmod(0o755)
            reported = subprocess.run(
                [binary, "--version"], capture_output=True, text=True, check=False
            ).stdout.strip()
    if "(commit " not in version:
        problem(f"Linux archive: VERSION says {version!r}, without the commit")
    if reported != version:
        problem(f"Linux archive: the daemon reports {reported!r}, VERSION says {version!r}")

    top = windows[0][: -len(".zip")]
    with zipfile.ZipFile(io.BytesIO(archives[windows[0]])) as zf:
        found = members(zf.namelist(), top)
        compare("Windows", found, WINDOWS_FILES)
        win_version = zf.read(f"{top}/VERSION").decode().strip()
        exe = zf.read(f"{top}/csi-proxy.exe")
        instructions = containerfile(zf.read(f"{top}/Containerfile").decode())
    if win_version != version:
        problem(f"the archives' VERSION files differ: {version!r} and {win_version!r}")
    line = version.removeprefix("csi-proxy ").encode()
    if line not in exe:
        problem(f"Windows archive: csi-proxy.exe does not carry {line!r}")
    for name in copied_to_root(instructions):
        if name not in found:
            problem(f"Windows archive: the Containerfile copies {name}, which is not beside it")


def main():
    check_static()
    if len(sys.argv) > 1:
        check_dist(Path(sys.argv[1]))
    for p in problems:
        print(f"check-release: {p}", file=sys.stderr)
    if problems:
        return 1
    print("check-release: the release pieces agree" + (f" ({sys.argv[1]})" if len(sys.argv) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

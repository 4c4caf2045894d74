#!/usr/bin/env python3
"""Checks that the release pieces agree (CI's `release` step of scripts/test.sh).

Usage: scripts/check-release.py [DIST]

Without DIST, statically: deploy/windows/Containerfile builds without running anything inside
Windows (no RUN), copies the executables to the image's root and starts the daemon; the
HostProcess DaemonSet names one image everywhere and starts an executable the Containerfile
puts at %CONTAINER_SANDBOX_MOUNT_POINT%; the install text (docs/install.md's archive table and
Linux commands, the unit's own) names what the archives hold, its Documentation= is installed,
the socket group's gid matches the node-plugin DaemonSet, and no zip is unpacked with tar.

With DIST (what scripts/release.sh wrote), also: SHA256SUMS matches both archives; each
archive unpacks into one directory of its own name holding exactly the expected files; the
Containerfile in the Windows archive finds every file it copies beside it; and both daemons
carry the version line of the archive's VERSION file (the Linux one is run with --version); the
zip's entries are in name order with the commit's time, as the tar's (reproducible).

Exits 1 naming every disagreement.
"""

import hashlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import time
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
    check_install_text()


def shell_commands(text):
    """The shell commands of `text`'s ```sh blocks and of `#   command` comment lines, as
    argument lists (trailing comments dropped, `&&` chains split)."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines += block.splitlines()
    lines += [m for m in re.findall(r"^#[ \t]+(\S.*)$", text, re.M)]
    commands = []
    for line in lines:
        line = re.sub(r"\s+#.*$", "", line.strip())
        for part in line.split("&&"):
            words = part.split()
            if words:
                commands.append(words)
    return commands


def installed_by(commands):
    """(sources, destinations): the files `install` and `cp` commands take, and the paths
    they put them at (a destination directory ends in /)."""
    sources, dests = set(), set()
    for words in commands:
        if words[0] not in ("install", "cp"):
            continue
        args = [w for w in words[1:] if not w.startswith("-")]
        if words[0] == "install" and "-m" in words:
            args = [a for a in args if a != words[words.index("-m") + 1]]
        *srcs, dest = args
        for src in srcs:
            sources.add(src)
            name = src.rstrip("/")
            dests.add(dest.rstrip("/") + "/" + name if dest.endswith("/") else dest)
    return sources, dests


def check_install_text():
    """The install text names what the archives hold: docs/install.md's archive table, the
    Linux install commands (docs/install.md and the unit's comment) run in the unpacked, flat
    archive, the unit's Documentation= is a URL or a file those commands install, the socket
    group's gid is one number in the commands, the unit and the node-plugin DaemonSet, and no
    zip is unpacked with tar."""
    guide = (ROOT / "docs/install.md").read_text()
    service = (ROOT / "deploy/linux/csi-proxy.service").read_text()
    daemonset = (ROOT / "deploy/linux/node-plugin-daemonset.yaml").read_text()
    containerfile_text = (ROOT / "deploy/windows/Containerfile").read_text()
    version = re.search(r'^\[workspace\.package\][^\[]*?^version = "([^"]+)"',
                        (ROOT / "Cargo.toml").read_text(), re.M | re.S).group(1)

    def top_level(files):
        return {f.split("/")[0] + ("/" if "/" in f else "") for f in files}

    for platform, suffix, files in (("linux", "tar.gz", LINUX_FILES), ("windows", "zip", WINDOWS_FILES)):
        row = re.search(rf"^\| `csi-proxy-<version>-{platform}-amd64\.{re.escape(suffix)}` \| (.*) \|$", guide, re.M)
        if not row:
            problem(f"docs/install.md: no archive table row for the {platform} archive")
            continue
        listed = {n.strip().strip("`") for n in row.group(1).split(",")}
        expected = top_level(files)
        if listed != expected:
            problem(f"docs/install.md: the {platform} archive row lists {sorted(listed)}; "
                    f"the archive holds {sorted(expected)}")

    flat = top_level(LINUX_FILES) | {"docs"}
    linux_section = guide.split("\n## Linux", 1)[-1].split("\n## ", 1)[0]
    for where, text in (("docs/install.md (Linux)", linux_section), ("csi-proxy.service", service)):
        commands = shell_commands(text)
        sources, dests = installed_by(commands)
        if not sources:
            problem(f"{where}: no install commands found")
        for src in sorted(sources - flat):
            problem(f"{where}: installs {src}, which the unpacked Linux archive does not hold")
        for words in commands:
            if words[0] == "tar" and any(w.endswith(".tar.gz") for w in words):
                name = next(w for w in words if w.endswith(".tar.gz"))
                if name != f"csi-proxy-{version}-linux-amd64.tar.gz":
                    problem(f"{where}: unpacks {name}; the release is csi-proxy-{version}-linux-amd64.tar.gz")
        if where == "csi-proxy.service":
            for doc in re.findall(r"^Documentation=(.*)$", service, re.M):
                for uri in doc.split():
                    if uri.startswith(("https://", "http://", "man:")):
                        continue
                    path = uri.removeprefix("file://")
                    if not any(path == d or path.startswith(d.rstrip("/") + "/") for d in dests):
                        problem(f"csi-proxy.service: Documentation={uri} is not a file the install commands install")
        gids = set()
        for words in commands:
            if words[0] == "groupadd":
                gid = words[words.index("--gid") + 1] if "--gid" in words else None
                if gid is None:
                    problem(f"{where}: groupadd without --gid picks a gid per node")
                gids.add(gid)
        wanted = re.findall(r"supplementalGroups:\s*\[(\d+)\]", daemonset)
        if gids != set(wanted) or len(wanted) != 1:
            problem(f"{where}: the socket group's gid {sorted(map(str, gids))} differs from "
                    f"node-plugin-daemonset.yaml's supplementalGroups {wanted}")

    for where, text in (("docs/install.md", guide), ("Containerfile", containerfile_text)):
        for words in shell_commands(text):
            if words[0] == "tar" and any(w.endswith(".zip") for w in words):
                problem(f"{where}: {' '.join(words)}: GNU tar does not unpack a zip (unzip)")


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
    for g, versions in re.findall(r"group_endpoints!\(list, s, (\w+), Group::\w+, place, \[(.*?)\]\);", registry, re.S):
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
    with tarfile.open(fileobj=io.BytesIO(archives[linux[0]])) as tar:
        stamps = {m.mtime for m in tar.getmembers()}
    with zipfile.ZipFile(io.BytesIO(archives[windows[0]])) as zf:
        # Reproducible: one time for every entry, the commit's (the tar's), in name order.
        times = {i.date_time for i in zf.infolist()}
        commit = time.gmtime(min(stamps))[:6]
        commit = commit[:5] + (commit[5] - commit[5] % 2,)  # zip keeps even seconds
        if len(stamps) != 1 or times != {commit}:
            problem(f"Windows archive: entry times {sorted(times)[:3]} are not the commit's "
                    f"({[time.gmtime(t)[:6] for t in sorted(stamps)][:3]}): it does not rebuild byte for byte")
        if zf.namelist() != sorted(zf.namelist()):
            problem("Windows archive: entries are not in name order")
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

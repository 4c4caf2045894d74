#!/usr/bin/env python3
"""Checks every relative link in the repository's Markdown files: the file or directory it
names exists, and an anchor (`page.md#heading`, `#heading`) names a heading of that page as
GitHub spells it. Links to the web are not fetched (CI has no internet).

Usage: scripts/check-links.py   (from anywhere in the checkout to check; exit 1 on a broken link)
"""
import os
import re
import subprocess
import sys

ROOT = subprocess.run(['git', 'rev-parse', '--show-toplevel'], capture_output=True, text=True,
                      check=True).stdout.strip()
LINK = re.compile(r'(?<!!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
FENCE = re.compile(r'^\s*(```|~~~)')


def anchors(path, cache={}):
    """GitHub's anchors of a Markdown file's headings (lower case, punctuation dropped, spaces
    as hyphens; repeated headings get -1, -2, ...)."""
    if path not in cache:
        seen, out, fenced = {}, set(), False
        with open(path, encoding='utf-8') as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
                if not m:
                    continue
                slug = re.sub(r'[^\w\- ]', '', m.group(1).replace('`', '').lower()).replace(' ', '-')
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                out.add(slug if n == 0 else f'{slug}-{n}')
        cache[path] = out
    return cache[path]


def links(path):
    fenced = False
    with open(path, encoding='utf-8') as f:
        for no, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            # Inline code is not a link.
            for m in LINK.finditer(re.sub(r'`[^`]*`', '``', line)):
                yield no, m.group(1)


def main():
    files = subprocess.run(['git', 'ls-files', '-z', '*.md'], capture_output=True, check=True,
                           cwd=ROOT).stdout.decode().split('\0')
    broken, count = [], 0
    for rel in filter(None, files):
        path = os.path.join(ROOT, rel)
        for no, target in links(path):
            if re.match(r'^[a-z][a-z0-9+.-]*:', target):
                continue  # https:, mailto:, file: ...
            count += 1
            name, _, anchor = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(path), name)) if name else path
            if not os.path.exists(dest):
                broken.append(f'{rel}:{no}: {target}: no such file')
            elif anchor and dest.endswith('.md') and anchor not in anchors(dest):
                broken.append(f'{rel}:{no}: {target}: no heading #{anchor} in {os.path.relpath(dest, ROOT)}')
    for b in broken:
        print(b, file=sys.stderr)
    print(f'check-links: {count} relative links, {len(broken)} broken')
    return 1 if broken else 0


if __name__ == '__main__':
    sys.exit(main())

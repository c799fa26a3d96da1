#!/usr/bin/env python3
"""Checks the relative links of README.md, BENCHMARKS.md and docs/*.md: every `[text](path#anchor)` outside
code must name a file that exists and, with `#anchor`, a heading of that file as GitHub spells its anchor
(lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats). The manual moves between files;
this finds a link left pointing at the old place. Exit 1 and one line per broken link.

Usage: scripts/check-doc-links.py [REPO_DIR]
"""
import glob
import os
import re
import sys


def code_mask(lines):
    """True for each line inside (or fencing) a ``` block: its `#` lines are not headings, its links not links."""
    mask, fence = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            mask.append(True)
            fence = not fence
        else:
            mask.append(fence)
    return mask


def anchor(heading):
    text = heading.lstrip("#").strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    seen, found = {}, set()
    for line, code in zip(lines, code_mask(lines)):
        if code or not re.match(r"#{1,6} ", line):
            continue
        a = anchor(line)
        if a in seen:
            seen[a] += 1
            found.add(f"{a}-{seen[a]}")
        else:
            seen[a] = 0
            found.add(a)
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    os.chdir(root)
    files = [f for f in ["README.md", "BENCHMARKS.md"] if os.path.exists(f)] + sorted(glob.glob("docs/*.md"))
    checked = broken = 0
    for f in files:
        lines = open(f, encoding="utf-8").read().split("\n")
        for no, (line, code) in enumerate(zip(lines, code_mask(lines)), 1):
            if code:
                continue
            line = re.sub(r"`[^`]*`(?!\])", "", line)  # inline code, but not a link's code text
            for m in re.finditer(r"\]\(([^)\s]+)\)", line):
                url = m.group(1)
                if re.match(r"[a-z][a-z0-9+.-]*:", url):
                    continue  # https:, mailto:
                checked += 1
                path, _, frag = url.partition("#")
                target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                if os.path.isdir(target):
                    target = os.path.join(target, "README.md")
                if not os.path.isfile(target):
                    print(f"{f}:{no}: {url}: no file {target}")
                    broken += 1
                elif frag and frag not in anchors(target):
                    print(f"{f}:{no}: {url}: {target} has no heading with anchor #{frag}")
                    broken += 1
    print(f"{checked} relative links checked, {broken} broken")
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()

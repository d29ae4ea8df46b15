#!/usr/bin/python3
"""Checks that the docs point at things that exist: every relative Markdown link
(and its #anchor) resolves, and every repository path quoted in backticks
(`src/engine/cycle.cc`, `bench/compare.py`, `tools/kolorun/`) names a file or
folder of the repository, or a program built from one (`bench/cross_core_copy`). Files move; docs that still name the old place mislead.

  tests/docs/check_links.py REPO_ROOT FILE.md...
"""

import pathlib
import re
import sys

# Top-level folders whose paths the docs quote.
ROOTS = ("src/", "tools/", "bench/", "tests/", "scripts/", "examples/", "python/", "include/", "docs/", "fuzz/",
         "cmake/", ".ci/")
HEADING = re.compile(r"^#+\s+(.*)$", re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
QUOTED = re.compile(r"`([^`\s]+)`")


def slug(heading):
    """The anchor a Markdown renderer gives a heading."""
    h = re.sub(r"[`*_]", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    return {slug(m.group(1)) for m in HEADING.finditer(path.read_text())} if path.is_file() else set()


def problems(repo, doc):
    text = doc.read_text()
    for m in LINK.finditer(text):
        link = m.group(1)
        if re.match(r"[a-z]+:", link):
            continue
        target, _, fragment = link.partition("#")
        path = (doc.parent / target) if target else doc
        if not path.exists():
            yield f"{doc}: link to a missing {link}"
        elif fragment and fragment not in anchors(path):
            yield f"{doc}: link to a missing heading {link}"
    for m in QUOTED.finditer(text):
        quoted = m.group(1).rstrip(".,:;")
        if not quoted.startswith(ROOTS) or any(c in quoted for c in "*<>{}$[]"):
            continue
        path = quoted.split(":")[0]  # file.cc:123
        # A program is named by its source (bench/cross_core_copy, bench/cross_core_copy.cc).
        if not any((repo / (path + ext)).exists() for ext in ("", ".cc", ".py", ".sh")):
            yield f"{doc}: names `{quoted}`, which is not in the repository"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    repo = pathlib.Path(sys.argv[1])
    found = [p for doc in sys.argv[2:] for p in problems(repo, pathlib.Path(doc))]
    for p in found:
        print(p)
    print(f"{len(found)} broken references in {len(sys.argv) - 2} files")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()

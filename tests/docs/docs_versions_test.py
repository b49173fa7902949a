"""The versions the user documentation tells people to install agree with c_api/VERSION.

Usage: docs_versions_test.py VERSION_FILE DOC.md...

Scans each Markdown file for the install strings that carry a version (the jar
`pipeforge-X.Y.Z.jar`, the wheel `pipeforge-X.Y.Z-<tags>.whl`, the Go module
`pipeforge-go@vX.Y.Z` or any `@vX.Y.Z`, the installed library `libpipeforge.so.X.Y.Z`, the
`pipeforge X.Y.Z` that --version prints) and fails naming the file, line and the expected version
for each one that is not c_api/VERSION's `version`. CHANGELOG.md is history and is not passed.
"""

import os
import re
import sys

# Each pattern's group 1 is the version it carries.
PATTERNS = [
    ("jar", re.compile(r"pipeforge-(\d+\.\d+\.\d+)\.jar")),
    ("wheel", re.compile(r"pipeforge-(\d+\.\d+\.\d+)-[^\s`'\"]*\.whl")),
    ("Go module version", re.compile(r"@v(\d+\.\d+\.\d+)")),
    ("library file", re.compile(r"libpipeforge(?:_\w+)?\.so\.(\d+\.\d+\.\d+)")),
    ("--version output", re.compile(r"\bpipeforge (\d+\.\d+\.\d+)\b")),
    ("tag", re.compile(r"\btag `?v(\d+\.\d+\.\d+)")),
]


def read_version(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*version\s*=\s*(\d+\.\d+\.\d+)\s*$", line)
            if m:
                return m.group(1)
    sys.exit(f"{path}: no 'version = X.Y.Z' line")


def display_name(path):
    # The name in the repository (Bazel passes runfiles paths such as docs/BINDINGS.md).
    m = re.search(r"(?:^|/)(docs/[^/]+)$", path.replace(os.sep, "/"))
    return m.group(1) if m else os.path.basename(path)


def check(version, paths):
    problems, seen = [], 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for what, pattern in PATTERNS:
                    for m in pattern.finditer(line):
                        seen += 1
                        if m.group(1) != version:
                            problems.append(f"{display_name(path)}:{number}: {what} says {m.group(1)} "
                                            f"({m.group(0)}), c_api/VERSION says {version}")
    return problems, seen


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    version = read_version(argv[1])
    docs = argv[2:]
    problems, seen = check(version, docs)
    for p in problems:
        print(p)
    if problems:
        print(f"FAILED: {len(problems)} version(s) in the docs disagree with c_api/VERSION ({version})")
        return 1
    if seen == 0:  # the patterns found nothing at all: they or the file list went wrong
        print("FAILED: no versioned install string found in " + ", ".join(docs))
        return 1
    print(f"OK: {seen} versioned install strings in {len(docs)} files all say {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Builds the pipeforge wheel from files Bazel built (//bindings/python:wheel runs it).

    make_wheel.py PYPROJECT VERSION_FILE OUT_WHEEL OUT_NAME DEST=SRC...

DEST is a path inside the wheel (pipeforge/_core.so, pipeforge/libpipeforge.so.1, ...). The wheel
is written to OUT_WHEEL (a fixed name, as Bazel needs) and its proper file name, e.g.
pipeforge-0.19.0-cp311-cp311-linux_x86_64.whl (PEP 427: what pip requires), to OUT_NAME. The tag is
that of the interpreter running this script, the one the extension was compiled for. Metadata come
from pyproject.toml's [project] table (its [project.scripts] become entry_points.txt's console
scripts, which pip installs as commands) and the version from c_api/VERSION. Files that are
executable where Bazel built them (the libraries, the `pipeforge` command) stay executable.
Deterministic: fixed timestamps and order, so the same inputs give the same bytes.
"""
import base64
import hashlib
import os
import re
import stat
import sys
import sysconfig
import tomllib
import zipfile


def wheel_tag():
    interpreter = "cp%d%d" % sys.version_info[:2]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s-%s" % (interpreter, interpreter, platform)


def metadata(project, version):
    lines = ["Metadata-Version: 2.1", "Name: " + project["name"], "Version: " + version,
             "Summary: " + project["description"], "Requires-Python: " + project["requires-python"]]
    lines += ["License: " + project["license"]["text"]] if "license" in project else []
    lines += ["Requires-Dist: " + d for d in project.get("dependencies", [])]
    return "\n".join(lines) + "\n"


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def main(argv):
    pyproject, version_file, out_wheel, out_name, *pairs = argv
    project = tomllib.load(open(pyproject, "rb"))["project"]
    version = re.search(r"^version *= *(\S+)", open(version_file).read(), re.M).group(1)
    name, tag = project["name"], wheel_tag()
    dist_info = "%s-%s.dist-info" % (name, version)
    files = []
    executables = set()
    for pair in sorted(pairs):
        dest, src = pair.split("=", 1)
        if dest.startswith("dist-info/"):  # e.g. the licence, beside METADATA
            dest = dist_info + dest[len("dist-info"):]
        files.append((dest, open(src, "rb").read()))
        if os.access(src, os.X_OK) and not dest.endswith(".py"):  # Bazel's copies of sources are 0555
            executables.add(dest)
    files.append((dist_info + "/METADATA", metadata(project, version).encode()))
    files.append((dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: pipeforge make_wheel.py\n"
                                         "Root-Is-Purelib: false\nTag: %s\n" % tag).encode()))
    files.append((dist_info + "/top_level.txt", (name + "\n").encode()))
    scripts = project.get("scripts", {})
    if scripts:
        lines = ["[console_scripts]"] + ["%s = %s" % (k, v) for k, v in sorted(scripts.items())]
        files.append((dist_info + "/entry_points.txt", ("\n".join(lines) + "\n").encode()))
    record = "\n".join([record_line(p, d) for p, d in files] + [dist_info + "/RECORD,,"]) + "\n"
    files.append((dist_info + "/RECORD", record.encode()))
    with zipfile.ZipFile(out_wheel, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            executable = path in executables or path.endswith(".so") or re.search(r"\.so\.\d+$", path)
            # A regular file's type bits too: pip keeps the execute bits only of what says it is one.
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    open(out_name, "w").write("%s-%s-%s.whl\n" % (name, version, tag))


if __name__ == "__main__":
    main(sys.argv[1:])

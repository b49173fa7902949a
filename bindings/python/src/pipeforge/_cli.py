"""The `pipeforge` command that pip installs (pyproject.toml's [project.scripts]).

It runs the command-line tool bundled in this package, the same program as Bazel's
`bazel-bin/pipeforge`: it replaces this Python process, so signals, exit codes and output are the
tool's own. The MPI and CUDA backends it loads lie beside it, so `mpirun -np N pipeforge train ...`
works as printed.
"""
import os
import sys


def executable():
    """The path of the bundled tool."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "pipeforge")


def main():
    tool = executable()
    if not os.access(tool, os.X_OK):
        sys.stderr.write("pipeforge: the command-line tool is missing from the installed package (%s); "
                         "reinstall the wheel\n" % tool)
        return 1
    os.execv(tool, ["pipeforge"] + sys.argv[1:])
    return 1  # not reached: execv replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())

"""local_python: the headers and interpreter of the python3 that runs the bindings' tests.

The default python3 on these machines is a pyenv build, whose headers are not under /usr/include, so
this repository rule asks the interpreter itself (sysconfig) and links its include folder in. The
interpreter is $PYTHON_BIN_PATH if set, else the first python3 on PATH: the one py_test and
py_binary run, so the extension module is built for the Python that loads it.

Targets: @local_python//:python_headers (cc_library), @local_python//:python3 (the interpreter,
an executable file that runs it).
"""

_PROBE = "\n".join([
    "import sys, sysconfig",
    "print(sysconfig.get_paths()['include'])",
    "print(sys.executable)",
    "print('%d.%d' % sys.version_info[:2])",
])

def _python_configure_impl(ctx):
    python = ctx.os.environ.get("PYTHON_BIN_PATH") or ctx.which("python3")
    if not python:
        fail("local_python: no python3 on PATH (set PYTHON_BIN_PATH); tools/setup.sh installs one")
    result = ctx.execute([python, "-c", _PROBE])
    if result.return_code != 0:
        fail("local_python: %s failed: %s" % (python, result.stderr))
    include, executable, version = result.stdout.strip().split("\n")
    if not ctx.path(include + "/Python.h").exists:
        fail("local_python: no Python.h in %s (install the python3-dev headers for %s)" % (include, executable))
    ctx.symlink(include, "include")
    ctx.file("python3", "#!/bin/sh\nexec '%s' \"$@\"\n" % executable, executable = True)
    ctx.template("BUILD.bazel", ctx.attr._build_template, {
        "%{executable}": executable,
        "%{version}": version,
    })

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["PATH", "PYTHON_BIN_PATH"],
    local = True,
    attrs = {"_build_template": attr.label(default = Label("//third_party/python:BUILD.tpl"))},
)

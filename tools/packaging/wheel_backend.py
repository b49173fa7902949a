"""The PEP 517 build backend behind pyproject.toml: `pip install .` and `pip wheel .` build the
wheel with Bazel (//bindings/python:wheel, tools/packaging/make_wheel.py) and hand it to pip.
Needs Bazel and the build's Debian packages (tools/setup.sh); downloads nothing."""
import io
import os
import shutil
import subprocess
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bazel(*args):
    # pip puts its build environment's bin folder first on PATH; Bazel's @local_python repository
    # depends on PATH, and re-resolving it would rebuild the extension (twice: here and after).
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if "pip-build-env-" not in p)
    command = os.environ.get("BAZEL", "bazel").split() + list(args)
    return subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, PATH=path)).stdout.strip()


def _version():
    for line in open(os.path.join(ROOT, "c_api", "VERSION")):
        if line.startswith("version"):
            return line.split("=", 1)[1].strip()
    raise RuntimeError("c_api/VERSION has no version line")


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _bazel("build", "--ui_event_filters=-info", "--noshow_progress", "//bindings/python:wheel")
    bin_dir = _bazel("info", "bazel-bin")
    name = open(os.path.join(bin_dir, "bindings", "python", "pipeforge.whl.name")).read().strip()
    shutil.copyfile(os.path.join(bin_dir, "bindings", "python", "pipeforge.whl"), os.path.join(wheel_directory, name))
    return name


def build_sdist(sdist_directory, config_settings=None):
    """The tracked source files (git ls-files) as pipeforge-VERSION.tar.gz; building it needs Bazel."""
    base = "pipeforge-" + _version()
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, stdout=subprocess.PIPE).stdout
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz") as archive:
        for name in sorted(f for f in files.decode().split("\0") if f):
            archive.add(os.path.join(ROOT, name), arcname=base + "/" + name, recursive=False)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = ("Metadata-Version: 2.1\nName: pipeforge\nVersion: %s\n" % _version()).encode()
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return os.path.basename(path)

#!/bin/bash
# The wheel installs into a fresh virtual environment outside the source tree and trains from an
# empty folder, with nothing of Bazel's on any path: its _core.so finds the bundled
# libpipeforge.so.<abi> through its $ORIGIN run path. It carries the licence (Apache-2.0). pip
# installs the `pipeforge` command with it (venv/bin/pipeforge): it trains, also as two processes
# under mpirun, as the tool's own printed lines say to run it.
# Usage: python_wheel_test.sh PYTHON WHEEL WHEEL_NAME_FILE VERSION_FILE SCRIPT.py
set -euo pipefail
source "$(dirname "$0")/user_program.sh"
python=$(realpath "$1") wheel=$(realpath "$2") name=$(cat "$3") version_file=$(realpath "$4") script=$(realpath "$5")
version=$(sed -n 's/^version *= *//p' "$version_file")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/python_wheel.XXXXXX")
fail() { echo "FAIL: $*"; exit 1; }
[[ $name == "pipeforge-$version-"*.whl ]] || fail "wheel name '$name' does not carry version $version"
mkdir "$work/dist" "$work/user"
cp "$wheel" "$work/dist/$name"
# numpy comes from the interpreter's own site-packages (no index is reachable in a test).
"$python" -m venv --system-site-packages "$work/venv"
unset PYTHONPATH LD_LIBRARY_PATH
"$work/venv/bin/pip" install --no-index --disable-pip-version-check -q "$work/dist/$name"
cp "$script" "$work/user/train.py"
cd "$work/user"
output=$(as_user_program "$work/venv/bin/python" train.py) || fail "the script failed: $output"
echo "$output"
grep -q "^pipeforge $version from $work/venv/lib/python[0-9.]*/site-packages/pipeforge/__init__.py: loss " <<<"$output" ||
  fail "pipeforge was not imported from the virtual environment"
if grep '^cuda: .*is not next to' <<<"$output"; then
  fail "the CUDA backend bundled in the wheel was not found"
fi
# The command, as a user with the environment activated types it.
check_installed_command "$work/venv/bin" "$version" || fail "the pipeforge command pip installed"
# The licence: in the metadata and as a file beside it.
shown=$("$work/venv/bin/pip" show pipeforge)
grep -qx "License: Apache-2.0" <<<"$shown" || fail "pip show does not say License: Apache-2.0: $shown"
grep -q "Apache License" "$work"/venv/lib/python*/site-packages/pipeforge-"$version".dist-info/LICENSE ||
  fail "the wheel's dist-info has no LICENSE"
"$work/venv/bin/pip" uninstall -y -q pipeforge
[[ ! -e $work/venv/lib/python*/site-packages/pipeforge ]] || fail "pip uninstall left the package behind"
[[ ! -e $work/venv/bin/pipeforge ]] || fail "pip uninstall left the pipeforge command behind"
echo "PASS: $name installs into a fresh venv, trains from an empty folder and uninstalls"

#!/bin/bash
# The C library installed into an empty prefix works as any pkg-config library does: a program
# outside the tree, compiled with `gcc $(pkg-config --cflags --libs pipeforge)`, links
# libpipeforge.so.<abi> by its SONAME, runs without LD_LIBRARY_PATH and trains.
# The CUDA backend installed beside the library is what a CUDA device request finds. The
# `pipeforge` command is installed too (PREFIX/bin/pipeforge): found on PATH, it trains, also as
# two processes under mpirun (its MPI backend found beside its real path).
# Usage: c_install_test.sh INSTALL_TREE LIBRARY HEADER VERSION_FILE CUDA_BACKEND MPI_BACKEND CLI PROGRAM.c
set -euo pipefail
source "$(dirname "$0")/user_program.sh"
install_tree=$(realpath "$1") library=$(realpath "$2") header=$(realpath "$3") version_file=$(realpath "$4")
backend=$(realpath "$5") mpi_backend=$(realpath "$6") cli=$(realpath "$7") program=$(realpath "$8")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/c_install.XXXXXX")
version=$(sed -n 's/^version *= *//p' "$version_file") abi=$(sed -n 's/^abi *= *//p' "$version_file")
fail() { echo "FAIL: $*"; exit 1; }

"$install_tree" "$work/prefix" "$library" "$header" "$version_file" "$backend" "$mpi_backend" "$cli" >"$work/installed"
[[ $(readlink "$work/prefix/lib/libpipeforge.so") == "libpipeforge.so.$abi" ]] || fail "libpipeforge.so does not link to .so.$abi"
[[ $(readlink "$work/prefix/lib/libpipeforge.so.$abi") == "libpipeforge.so.$version" ]] || fail "libpipeforge.so.$abi does not link to .so.$version"

# A user's folder: only the program's source; nothing of the source tree or Bazel on any path.
mkdir "$work/user" && cp "$program" "$work/user/main.c" && cd "$work/user"
export PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig
unset LD_LIBRARY_PATH
[[ $(pkg-config --modversion pipeforge) == "$version" ]] || fail "pkg-config --modversion says $(pkg-config --modversion pipeforge), VERSION says $version"
# shellcheck disable=SC2046  # pkg-config prints several words on purpose
gcc -std=c99 -Wall -Wextra -Werror -o main main.c $(pkg-config --cflags --libs pipeforge)
needed=$(readelf -d main | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
grep -qx "libpipeforge.so.$abi" <<<"$needed" || fail "the program does not need libpipeforge.so.$abi: $needed"
loaded=$(ldd main)  # not piped into grep -q: an early exit would make ldd fail under pipefail
grep -q "libpipeforge.so.$abi => $work/prefix/lib/libpipeforge.so.$abi" <<<"$loaded" ||
  fail "the program does not load the installed library: $(grep pipeforge <<<"$loaded")"
output=$(as_user_program ./main) || fail "the program failed: $output"
echo "$output"
grep -q "^pipeforge $version (ABI $abi): loss " <<<"$output" || fail "unexpected output"
cuda=$(grep '^cuda: ' <<<"$output")
if grep -q 'is not next to' <<<"$cuda"; then fail "the installed CUDA backend was not found: $cuda"; fi

# The command, as a user with PREFIX/bin on PATH types it.
grep -qx "$work/prefix/bin/pipeforge" "$work/installed" || fail "install_tree.sh did not list bin/pipeforge"
check_installed_command "$work/prefix/bin" "$version" || fail "the installed pipeforge command"
echo "PASS: installed into an empty prefix; a pkg-config build outside the tree trains; so does the pipeforge command"

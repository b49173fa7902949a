#!/bin/bash
# A Go module outside the tree (go.mod + main.go, nothing else) gets the binding with `go get` from
# a module proxy (the one tools/package.sh go writes, served from files) and builds against the C
# library installed with pkg-config into an empty prefix; the program runs without
# LD_LIBRARY_PATH and trains.
# Usage: go_module_test.sh INSTALL_TREE LIBRARY HEADER VERSION_FILE CUDA_BACKEND MPI_BACKEND CLI PROXY_TAR MAIN.go
set -euo pipefail
source "$(dirname "$0")/user_program.sh"
install_tree=$(realpath "$1") library=$(realpath "$2") header=$(realpath "$3") version_file=$(realpath "$4")
backend=$(realpath "$5") mpi_backend=$(realpath "$6") cli=$(realpath "$7") proxy_tar=$(realpath "$8") main_go=$(realpath "$9")
version=$(sed -n 's/^version *= *//p' "$version_file")
module=github.com/pipeforge/pipeforge-go
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/go_module.XXXXXX")
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$work/proxy" "$work/user"
tar -C "$work/proxy" -xf "$proxy_tar"
"$install_tree" "$work/prefix" "$library" "$header" "$version_file" "$backend" "$mpi_backend" "$cli" >/dev/null

cd "$work/user"
cp "$main_go" main.go
printf 'module example.com/trainer\n\ngo 1.19\n' >go.mod
unset LD_LIBRARY_PATH CGO_LDFLAGS CGO_CFLAGS CGO_CXXFLAGS
export HOME=$work/home GOPATH=$work/gopath GOCACHE=$work/cache GOTMPDIR=$work GOTOOLCHAIN=local GOFLAGS=
export GOPROXY=file://$work/proxy GONOSUMDB=$module  # the checksum database has never seen it
export PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig
mkdir -p "$HOME"
go get "$module@v$version"
grep -q "require $module v$version" go.mod || fail "go get did not record $module v$version in go.mod: $(cat go.mod)"
go build -o trainer .
grep -q "Apache License" "$work/gopath/pkg/mod/$module@v$version/LICENSE" || fail "the module has no LICENSE"
output=$(as_user_program ./trainer) || fail "the program failed: $output"
echo "$output"
grep -q "^pipeforge $version: loss " <<<"$output" || fail "unexpected output"
chmod -R u+w "$work/gopath" # the module cache is read-only; let the test's temp folder be removed
echo "PASS: go get $module@v$version from a module proxy; the outside module builds with pkg-config and trains"

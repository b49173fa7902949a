#!/bin/bash
# Assembles the Go module of the binding in a scratch folder and builds from it (Bazel has no Go
# rules here: genrules call this through //bindings/go:go.bzl).
#
#   go_module.sh MODE OUT LIBPIPEFORGE HEADER VERSION_FILE [DEST=SRC ...]
#
# MODE: test (go test -c of the module's root package: the test files are among DEST=SRC),
#       check (go build of every package, go vet of the public one; OUT is a stamp file),
#       build:PKG (go build ./PKG), tar (the assembled module as a tarball), or proxy (a tarball of
#       a file-system module proxy serving the module at the version of VERSION_FILE:
#       GOPROXY=file://DIR after unpacking it in DIR; tools/packaging/go_proxy.py).
# LIBPIPEFORGE, HEADER: libpipeforge.so.<abi> and pipeforge.h, which cgo finds through a
#       pipeforge.pc written here (the module asks pkg-config, as it does when installed);
#       binaries find the library through a run path relative to OUT ($ORIGIN/...), which holds
#       in bazel-bin and in runfiles alike.
# DEST=SRC: put file SRC at DEST inside the module.
set -euo pipefail
mode=$1 out=$2 lib=$3 header=$4 version_file=$5
shift 5

root=$PWD
packaging=$root/tools/packaging
scratch=$(mktemp -d)
trap 'chmod -R u+w "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
module=$scratch/module
for pair in "$@"; do
  dest=${pair%%=*} src=${pair#*=}
  mkdir -p "$module/$(dirname "$dest")"
  cp "$src" "$module/$dest"
done
version=$(sed -n 's/^version *= *//p' "$version_file")
module_path=$(sed -n 's/^module *//p' "$module/go.mod")

case $mode in
  tar) tar -C "$module" --sort=name --owner=0 --group=0 --mtime=@0 -cf "$out" . && exit 0 ;;
  proxy) python3 "$packaging/go_proxy.py" "$module" "$module_path" "v$version" "$out" && exit 0 ;;
esac

# A writable, private Go environment; nothing may be downloaded.
export HOME=$scratch/home GOCACHE=$scratch/cache GOPATH=$scratch/gopath GOTMPDIR=$scratch
mkdir -p "$HOME" "$GOCACHE" "$GOPATH"
export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local CGO_ENABLED=1
export CGO_CXXFLAGS="-O1"
mkdir "$scratch/lib" "$scratch/include" "$scratch/pkgconfig"
ln -s "$root/$lib" "$scratch/lib/libpipeforge.so"
ln -s "$root/$header" "$scratch/include/pipeforge.h"
"$packaging/pkg_config.sh" "$scratch" "$scratch/lib" "$scratch/include" "$version" >"$scratch/pkgconfig/pipeforge.pc"
export PKG_CONFIG_PATH=$scratch/pkgconfig
rpath=$(realpath -m --relative-to="$(dirname "$root/$out")" "$root/$(dirname "$lib")")
export CGO_LDFLAGS="-Wl,-rpath,\$ORIGIN/$rpath"

cd "$module"
case $mode in
  test) go test -c -o "$root/$out" . ;;
  check) go build ./... && go vet . && echo "go build ./... and go vet .: OK" >"$root/$out" ;;
  build:*) go build -o "$root/$out" "./${mode#build:}" ;;
  *) echo "go_module.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac

#!/bin/bash
# Assembles the Go module of the binding in a scratch folder and builds from it (Bazel has no Go
# rules here: genrules call this through //bindings/go:go.bzl).
#
#   go_module.sh MODE OUT LIBPIPEFORGE [DEST=SRC ...]
#
# MODE: test (go test -c of the module's root package: the test files are among DEST=SRC),
#       check (go build of every package, go vet of the public one; OUT is a stamp file),
#       build:PKG (go build ./PKG), or tar (the assembled module as a tarball, for users).
# LIBPIPEFORGE: libpipeforge.so.<abi>, linked by cgo (-lpipeforge, through a libpipeforge.so link
#       made here); binaries find it through a run path relative to OUT ($ORIGIN/...), which holds
#       in bazel-bin and in runfiles alike.
# DEST=SRC: put file SRC at DEST inside the module.
set -euo pipefail
mode=$1 out=$2 lib=$3
shift 3

root=$PWD
scratch=$(mktemp -d)
trap 'chmod -R u+w "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
module=$scratch/module
for pair in "$@"; do
  dest=${pair%%=*} src=${pair#*=}
  mkdir -p "$module/$(dirname "$dest")"
  cp "$src" "$module/$dest"
done

if [[ $mode == tar ]]; then
  tar -C "$module" --sort=name --owner=0 --group=0 --mtime=@0 -cf "$out" .
  exit 0
fi

# A writable, private Go environment; nothing may be downloaded.
export HOME=$scratch/home GOCACHE=$scratch/cache GOPATH=$scratch/gopath GOTMPDIR=$scratch
mkdir -p "$HOME" "$GOCACHE" "$GOPATH"
export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local CGO_ENABLED=1
export CGO_CXXFLAGS="-O1"
rpath=$(realpath -m --relative-to="$(dirname "$root/$out")" "$root/$(dirname "$lib")")
mkdir "$scratch/lib"
ln -s "$root/$lib" "$scratch/lib/libpipeforge.so"
export CGO_LDFLAGS="-L$scratch/lib -Wl,-rpath,\$ORIGIN/$rpath"

cd "$module"
case $mode in
  test) go test -c -o "$root/$out" . ;;
  check) go build ./... && go vet . && echo "go build ./... and go vet .: OK" >"$root/$out" ;;
  build:*) go build -o "$root/$out" "./${mode#build:}" ;;
  *) echo "go_module.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac

#!/bin/bash
# Builds the installable artifacts into dist/ (docs/INSTALL.md):
#
#   tools/package.sh python   # dist/pipeforge-<version>-<tag>.whl    pip install dist/pipeforge-*.whl
#   tools/package.sh java     # dist/pipeforge-<version>.jar          java -cp pipeforge-<version>.jar:. Main
#   tools/package.sh go       # dist/go/: the Go module as a module proxy (GOPROXY=file://$PWD/dist/go)
#   tools/package.sh all
#
# The C library installs with tools/install.sh --prefix DIR. Extra arguments after the artifact
# names go to `bazel build` (e.g. tools/package.sh python -- --config=portable).
set -euo pipefail
cd "$(dirname "$0")/.."
artifacts=()
while (($#)); do
  case $1 in
    python|java|go) artifacts+=("$1"); shift ;;
    all) artifacts+=(python java go); shift ;;
    --) shift; break ;;
    *) echo "package.sh: unknown artifact '$1' (python, java, go or all)" >&2; exit 2 ;;
  esac
done
((${#artifacts[@]})) || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
read -r -a bazel <<<"${BAZEL:-bazel}"
version=$(sed -n 's/^version *= *//p' c_api/VERSION)
declare -A target=([python]=//bindings/python:wheel [java]=//bindings/java:pipeforge.jar [go]=//bindings/go:module_proxy)
targets=()
for a in "${artifacts[@]}"; do targets+=("${target[$a]}"); done
"${bazel[@]}" build --ui_event_filters=-info --noshow_progress "$@" "${targets[@]}"
bin=$("${bazel[@]}" info "$@" bazel-bin 2>/dev/null)
mkdir -p dist
for a in "${artifacts[@]}"; do
  case $a in
    python)
      name=$(cat "$bin/bindings/python/pipeforge.whl.name")
      install -m 0644 "$bin/bindings/python/pipeforge.whl" "dist/$name" && echo "dist/$name" ;;
    java)
      install -m 0644 "$bin/bindings/java/pipeforge.jar" "dist/pipeforge-$version.jar" && echo "dist/pipeforge-$version.jar" ;;
    go)
      rm -rf dist/go && mkdir -p dist/go && tar -C dist/go -xf "$bin/bindings/go/module_proxy.tar" && echo "dist/go (GOPROXY=file://$PWD/dist/go)" ;;
  esac
done

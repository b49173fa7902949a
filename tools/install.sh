#!/bin/bash
# Builds the C library and the `pipeforge` command and installs them with the header and pkg-config file:
#
#   tools/install.sh --prefix DIR        # e.g. --prefix "$HOME/.local" or --prefix /usr/local
#
# then `gcc my_program.c $(PKG_CONFIG_PATH=DIR/lib/pkgconfig pkg-config --cflags --libs pipeforge)`.
# DIR/lib holds libpipeforge.so.<version>, the libpipeforge.so.<abi> link programs load and the
# libpipeforge.so link -lpipeforge finds (tools/packaging/install_tree.sh lists the files). For
# /usr and /usr/local it runs ldconfig; elsewhere the pkg-config file adds a run path. DIR/bin/pipeforge
# is the command line (put DIR/bin on PATH).
# Extra arguments after -- go to `bazel build` (e.g. -- --config=portable).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=
while (($#)); do
  case $1 in
    --prefix) prefix=${2:?--prefix needs a folder}; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (expected --prefix DIR)" >&2; exit 2 ;;
  esac
done
[[ -n $prefix ]] || { echo "install.sh: --prefix DIR is required" >&2; exit 2; }
abi=$(sed -n 's/^abi *= *//p' c_api/VERSION)
read -r -a bazel <<<"${BAZEL:-bazel}"
"${bazel[@]}" build --ui_event_filters=-info --noshow_progress "$@" "//c_api:libpipeforge.so.$abi" \
  "//c_api:libpipeforge_cuda.so.$abi" "//c_api:libpipeforge_mpi.so.$abi" //c_api:pipeforge.h //:pipeforge
bin=$("${bazel[@]}" info "$@" bazel-bin 2>/dev/null)
tools/packaging/install_tree.sh "$prefix" "$bin/c_api/libpipeforge.so.$abi" "$bin/c_api/pipeforge.h" c_api/VERSION \
  "$bin/c_api/libpipeforge_cuda.so.$abi" "$bin/c_api/libpipeforge_mpi.so.$abi" "$bin/pipeforge"
if [[ $prefix == /usr || $prefix == /usr/local ]] && command -v ldconfig >/dev/null; then ldconfig; fi

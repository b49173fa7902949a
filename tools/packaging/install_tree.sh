#!/bin/bash
# Installs built files of the C library into a prefix: what tools/install.sh does after building.
#
#   install_tree.sh PREFIX LIBRARY HEADER VERSION_FILE CUDA_BACKEND MPI_BACKEND CLI
#
# LIBRARY is libpipeforge.so.<abi> (as Bazel builds it: //c_api:libpipeforge.so.<abi>), HEADER the
# generated pipeforge.h, VERSION_FILE c_api/VERSION, CUDA_BACKEND and MPI_BACKEND
# libpipeforge_cuda.so.<abi> and libpipeforge_mpi.so.<abi>, CLI the `pipeforge` command (//:pipeforge).
# Installs
#   PREFIX/include/pipeforge.h
#   PREFIX/lib/libpipeforge.so.<version>          the library (SONAME libpipeforge.so.<abi>)
#   PREFIX/lib/libpipeforge.so.<abi> -> libpipeforge.so.<version>   what programs load
#   PREFIX/lib/libpipeforge.so -> libpipeforge.so.<abi>             what -lpipeforge links
#   PREFIX/lib/libpipeforge_cuda.so.<abi>   the backends, loaded from beside the library when
#   PREFIX/lib/libpipeforge_mpi.so.<abi>    a CUDA device or one process per rank is asked for
#   PREFIX/lib/pkgconfig/pipeforge.pc
#   PREFIX/lib/pipeforge-cli                 the command; it loads the MPI and CUDA backends from
#   PREFIX/bin/pipeforge -> ../lib/pipeforge-cli   beside its real path, as the library does
# and prints the installed paths. Refuses a library whose SONAME is not libpipeforge.so.<abi>.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "install_tree.sh: $*" >&2; exit 1; }
(($# == 7)) || die "usage: install_tree.sh PREFIX LIBRARY HEADER VERSION_FILE CUDA_BACKEND MPI_BACKEND CLI"
prefix=$1 library=$2 header=$3 version_file=$4 backend=$5 mpi_backend=$6 cli=$7
[[ -f $cli ]] || die "command '$cli' does not exist"
[[ -f $library ]] || die "library '$library' does not exist"
[[ -f $backend ]] || die "CUDA backend '$backend' does not exist"
[[ -f $mpi_backend ]] || die "MPI backend '$mpi_backend' does not exist"
[[ -f $header ]] || die "header '$header' does not exist"
version=$(sed -n 's/^version *= *//p' "$version_file")
abi=$(sed -n 's/^abi *= *//p' "$version_file")
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$version_file: no 'version = X.Y.Z' line"
[[ $abi =~ ^[0-9]+$ ]] || die "$version_file: no 'abi = N' line"
soname=$(readelf -d "$library" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname == "libpipeforge.so.$abi" ]] || die "$library has SONAME '$soname', expected libpipeforge.so.$abi"

mkdir -p "$prefix" || die "cannot create prefix '$prefix'"
prefix=$(cd "$prefix" && pwd)
lib=$prefix/lib include=$prefix/include
mkdir -p "$lib/pkgconfig" "$include" "$prefix/bin"
install -m 0644 "$header" "$include/pipeforge.h"
install -m 0755 "$library" "$lib/libpipeforge.so.$version"
ln -sfn "libpipeforge.so.$version" "$lib/libpipeforge.so.$abi"
ln -sfn "libpipeforge.so.$abi" "$lib/libpipeforge.so"
install -m 0755 "$backend" "$lib/libpipeforge_cuda.so.$abi"
install -m 0755 "$mpi_backend" "$lib/libpipeforge_mpi.so.$abi"
install -m 0755 "$cli" "$lib/pipeforge-cli"
ln -sfn ../lib/pipeforge-cli "$prefix/bin/pipeforge"
rpath=--rpath
[[ $prefix == /usr || $prefix == /usr/local ]] && rpath=
"$here/pkg_config.sh" "$prefix" "$lib" "$include" "$version" $rpath >"$lib/pkgconfig/pipeforge.pc"
printf '%s\n' "$include/pipeforge.h" "$lib/libpipeforge.so.$version" "$lib/libpipeforge.so.$abi" \
  "$lib/libpipeforge.so" "$lib/libpipeforge_cuda.so.$abi" "$lib/libpipeforge_mpi.so.$abi" "$lib/pkgconfig/pipeforge.pc" \
  "$lib/pipeforge-cli" "$prefix/bin/pipeforge"

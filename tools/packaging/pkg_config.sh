#!/bin/bash
# Writes pipeforge.pc, the pkg-config file of the C library, to stdout.
#
#   pkg_config.sh PREFIX LIBDIR INCLUDEDIR VERSION [--rpath]
#
# LIBDIR and INCLUDEDIR are absolute (under PREFIX where they are, written as ${prefix}/...).
# --rpath adds -Wl,-rpath,${libdir} to Libs, so programs linked with `pkg-config --libs pipeforge`
# find the library in a folder the dynamic loader does not search (any prefix but /usr and
# /usr/local, where tools/install.sh runs ldconfig instead).
set -euo pipefail
prefix=$1 libdir=$2 includedir=$3 version=$4 rpath=${5:-}
under_prefix() { [[ $1 == "$prefix"/* ]] && echo "\${prefix}/${1#"$prefix"/}" || echo "$1"; }
libs='-L${libdir} -lpipeforge'
[[ $rpath == --rpath ]] && libs+=' -Wl,-rpath,${libdir}'
cat <<PC
prefix=$prefix
libdir=$(under_prefix "$libdir")
includedir=$(under_prefix "$includedir")

Name: pipeforge
Description: PipeForge pipeline-parallel training runtime (C API)
Version: $version
Libs: $libs
Cflags: -I\${includedir}
PC

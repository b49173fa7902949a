#!/bin/bash
# Writes pipeforge.h to stdout: the template with the version macros filled in from VERSION.
# Usage: gen_header.sh VERSION pipeforge.h.in
set -euo pipefail
version_file=$1
template=$2
version=$(sed -n 's/^version *= *//p' "$version_file")
abi=$(sed -n 's/^abi *= *//p' "$version_file")
if ! [[ $abi =~ ^[0-9]+$ ]]; then
  echo "gen_header.sh: $version_file: 'abi = N' expected, got '$abi'" >&2
  exit 1
fi
if ! [[ $version =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "gen_header.sh: $version_file: 'version = X.Y.Z' expected, got '$version'" >&2
  exit 1
fi
out=$(sed -e "s/@PF_VERSION_MAJOR@/${BASH_REMATCH[1]}/" \
          -e "s/@PF_VERSION_MINOR@/${BASH_REMATCH[2]}/" \
          -e "s/@PF_VERSION_PATCH@/${BASH_REMATCH[3]}/" \
          -e "s/@PF_VERSION_STRING@/${version}/" \
          -e "s/@PF_ABI_VERSION@/${abi}/" \
          -e "1s|^/\* PipeForge C API (template: .*|/* PipeForge C API. Generated from c_api/pipeforge.h.in and c_api/VERSION: do not edit.|" \
          "$template")
if grep -q '@PF_[A-Z_]*@' <<<"$out"; then
  echo "gen_header.sh: unfilled placeholder in $template" >&2
  exit 1
fi
printf '%s\n' "$out"

#!/bin/bash
# Records new C API entries (functions, symbols, struct fields, enum values) in c_api/abi/v<abi>.txt
# after building the library; refuses, listing them, if an existing promise was broken.
set -euo pipefail
cd "$(dirname "$0")/../.."
abi=$(sed -n 's/^abi *= *//p' c_api/VERSION)
bazel build --ui_event_filters=-info --noshow_progress "//c_api:libpipeforge.so.$abi" //c_api:pipeforge.h
bin=$(bazel info bazel-bin 2>/dev/null)
python3 c_api/abi/abi_dump.py update "$bin/c_api/pipeforge.h" "$bin/c_api/libpipeforge.so.$abi" "c_api/abi/v$abi.txt"

#!/usr/bin/env bash
# Builds every GPU test binary and the GPU benchmark HERE (Bazel machine, no GPU needed) and packs
# them, with the non-system shared libraries they load, into gpu_bundle/ at the repository root,
# for tools/gpu_check.sh to run on the GPU machine (which has CUDA but no Bazel). See
# docs/CUDA_KERNELS.md, "GPU checks".
#
#   tools/gpu_bundle.sh
#   BAZEL="bazel --output_base=/tmp/mine" BAZEL_BUILD_OPTS="--jobs=2" tools/gpu_bundle.sh
#
# What it builds: every cc_test in //tests/kernels/..., //tests/devices/..., //tests/gpu/... and the
# GPU tests of the executor and the activation store (found by a bazel
# query, so new tests are picked up), the googletest binaries that run as mpirun ranks (MPIRUN_TESTS
# below, with their process counts) and //bench/gpu:gpt_block_gpu_bench, with --keep_going: a test
# target that fails to build is left out of the bundle and listed in gpu_bundle/MANIFEST (other
# engineers' work in progress must not block the rest). The benchmark failing to build is an error.
#
# Layout of gpu_bundle/ (relocatable: nothing refers to this machine's paths):
#   bin/            stripped copies of the binaries
#   lib/            Bazel's per-library .so files (_solib_*), OpenBLAS (OpenMP build) and its
#                   libgfortran / libquadmath / libgomp; files over 16 MiB are stored as NAME.xz and
#                   expanded by env.sh on first use
#   lib/fallback/   libstdc++, libgcc_s, libcrypto from this machine: used only when the GPU
#                   machine's own copies are missing or too old
#   env.sh          `. gpu_bundle/env.sh` sets LD_LIBRARY_PATH (bundle libs, then the CUDA
#                   libraries of the GPU machine: /usr/local/cuda, $CUDA_HOME, pip nvidia-* wheels)
#   tests.txt       "<label> bin/<name>" per test binary, "<label> bin/<name> mpirun <N>" for one run
#                   as N mpirun ranks; MANIFEST: what was built, from what
#   torch_gpt_block.py  copy of bench/gpu/torch_gpt_block.py
# CUDA's own libraries (cudart, cuBLAS, cuBLASLt, NCCL; hundreds of MiB) and glibc are NOT bundled:
# the GPU machine provides them. The binaries need glibc >= 2.34.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

read -r -a bazel <<<"${BAZEL:-bazel}"
read -r -a build_opts <<<"${BAZEL_BUILD_OPTS:-}"
# No bazel-* convenience symlinks: outputs are found through `bazel info bazel-bin`.
common=(--symlink_prefix=/ "${build_opts[@]}")
bench_label=//bench/gpu:gpt_block_gpu_bench
# cc_binary googletests run as mpirun ranks (on //tests/util:mpi_gtest_main): "<label> <processes>".
MPIRUN_TESTS=("//tests/gpu:mpirun_pipeline_gpu 2")
bundle="$root/gpu_bundle"
max_mib=60
xz_over_bytes=$((16 * 1024 * 1024))

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_bundle.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== finding test targets" >&2
# --keep_going: a package that fails to load (someone's half-edited BUILD) drops only its targets.
"${bazel[@]}" query --keep_going --output=label \
  'kind("cc_test rule", //tests/kernels/... + //tests/devices/... + //tests/gpu/...) + //tests/comm:nccl_transport_test + //tests/execution:gpu_pipeline_test + //tests/memory:gpu_activation_store_test' >"$work/tests.labels" 2>"$work/query.log" || true
if [[ ! -s "$work/tests.labels" ]]; then
  cat "$work/query.log" >&2
  echo "gpu_bundle: bazel query found no GPU cc_test targets" >&2
  exit 1
fi
for entry in "${MPIRUN_TESTS[@]}"; do
  echo "${entry%% *}" >>"$work/tests.labels"
done
sort -o "$work/tests.labels" "$work/tests.labels"
echo "   $(wc -l <"$work/tests.labels") test targets" >&2

echo "== building (bazel build --keep_going)" >&2
mapfile -t labels <"$work/tests.labels"
set +e
"${bazel[@]}" build --keep_going --color=no --curses=no "${common[@]}" \
  --build_event_json_file="$work/bep.json" "${labels[@]}" "$bench_label" 2>&1 | tee "$work/build.log" >&2
build_rc=${PIPESTATUS[0]}
set -e
bazel_bin=$("${bazel[@]}" info "${common[@]}" bazel-bin 2>/dev/null)

# Targets that completed successfully, from the build event protocol (not from files on disk, which
# may be stale outputs of an earlier successful build).
python3 - "$work/bep.json" >"$work/built.labels" <<'EOF'
import json, sys
ok = set()
for line in open(sys.argv[1]):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    tc = ev.get("id", {}).get("targetCompleted")
    if tc and ev.get("completed", {}).get("success"):
        ok.add(tc["label"])
print("\n".join(sorted(ok)))
EOF
if ! grep -qxF "$bench_label" "$work/built.labels"; then
  echo "gpu_bundle: $bench_label failed to build (bazel exit $build_rc)" >&2
  exit 1
fi
grep -vxF "$bench_label" "$work/built.labels" | grep -xFf "$work/tests.labels" >"$work/tests.ok" || true
grep -vxFf "$work/tests.ok" "$work/tests.labels" >"$work/tests.failed" || true

echo "== packing $bundle" >&2
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib/fallback"
label_path() { local l=${1#//}; echo "${l%%:*}/${l##*:}"; }

# Shared libraries: glibc's own and CUDA's stay on the GPU machine; the C++/OpenSSL runtimes go to
# lib/fallback; everything else (Bazel's _solib libraries, OpenBLAS and its Fortran/OpenMP
# runtimes, ...) to lib/.
classify() {
  case "$1" in
    linux-vdso.so* | ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
      libresolv.so* | libutil.so* | libmvec.so*) echo system ;;
    libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libnccl.so* | libnvidia-*) echo cuda ;;
    libstdc++.so* | libgcc_s.so* | libcrypto.so* | libssl.so* | libz.so*) echo fallback ;;
    *) echo bundle ;;
  esac
}
: >"$work/cuda.needs"
copy_libs_of() {  # $1 = a binary or library (unstripped original)
  local line name path
  while read -r line; do
    if [[ $line == *"not found"* ]]; then
      echo "gpu_bundle: unresolved library for $1: $line" >&2
      exit 1
    fi
    [[ $line == *"=>"* ]] || continue
    name=$(awk '{print $1}' <<<"$line")
    path=$(awk '{print $3}' <<<"$line")
    case $(classify "$name") in
      system) ;;
      cuda) echo "$name" >>"$work/cuda.needs" ;;
      fallback) [[ -e "$bundle/lib/fallback/$name" ]] || strip --strip-unneeded -o "$bundle/lib/fallback/$name" "$path" ;;
      bundle) [[ -e "$bundle/lib/$name" ]] || strip --strip-unneeded -o "$bundle/lib/$name" "$path" ;;
    esac
  done < <(ldd "$1")
}

: >"$bundle/tests.txt"
while read -r label; do
  [[ -n $label ]] || continue
  src="$bazel_bin/$(label_path "$label")"
  name=$(basename "$src")
  strip --strip-unneeded -o "$bundle/bin/$name" "$src"
  copy_libs_of "$src"
  launch=""
  for entry in "${MPIRUN_TESTS[@]}"; do
    [[ ${entry%% *} == "$label" ]] && launch=" mpirun ${entry##* }"
  done
  echo "$label bin/$name$launch" >>"$bundle/tests.txt"
done <"$work/tests.ok"
src="$bazel_bin/$(label_path "$bench_label")"
strip --strip-unneeded -o "$bundle/bin/$(basename "$src")" "$src"
copy_libs_of "$src"
cp "$root/bench/gpu/torch_gpt_block.py" "$bundle/"
chmod 755 "$bundle/bin/"*

# Large libraries (OpenBLAS: 36 MiB, 4 MiB as xz) travel compressed.
for f in "$bundle/lib/"*.so*; do
  [[ -f $f && $(stat -c %s "$f") -gt $xz_over_bytes ]] || continue
  xz -T0 -6 "$f"
done
(cd "$bundle/lib" && sha256sum -- *.xz >SUMS 2>/dev/null) || : >"$bundle/lib/SUMS"

# Same sources as the working tree? gpu_check.sh recomputes this and warns when they differ.
source_hash() {
  (cd "$root" && find runtime tests/kernels tests/devices tests/comm tests/gpu tests/execution tests/memory tests/util bench/gpu third_party tools/build_defs \
    -type f \( -name '*.cc' -o -name '*.cu' -o -name '*.h' -o -name '*.cuh' -o -name BUILD \
    -o -name '*.bzl' -o -name '*.BUILD' \) -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}
{
  echo "built:        $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "git commit:   $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    [[ -n $(git -C "$root" status --porcelain 2>/dev/null | head -1) ]] && echo ' (working tree has changes)')"
  echo "source hash:  $(source_hash)"
  echo "glibc needed: >= $(for f in "$bundle"/bin/* "$bundle"/lib/*.so*; do
    [[ $f == *.xz ]] || objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_2\.[0-9]*' | sort -Vu | tail -1 | cut -d_ -f2)"
  echo "cuda libs:    $(sort -u "$work/cuda.needs" | tr '\n' ' ')(from the GPU machine)"
  echo "tests:        $(wc -l <"$work/tests.ok") built"
  while read -r l; do [[ -n $l ]] && echo "left out:     $l (failed to build here)"; done <"$work/tests.failed"
  echo "benchmark:    bin/$(basename "$src")"
} >"$bundle/MANIFEST"
sort -u "$work/cuda.needs" >"$bundle/cuda_libs.txt"

cat >"$bundle/env.sh" <<'ENVEOF'
# Source me (bash): `. gpu_bundle/env.sh`. Puts the bundle's libraries and the GPU machine's CUDA
# libraries on LD_LIBRARY_PATH; works wherever the folder was copied. Sets PF_BUNDLE (this folder)
# and PF_BUNDLE_PROBLEMS (empty when every binary's libraries resolve).
PF_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PF_BUNDLE
pf_lib="$PF_BUNDLE/lib"
# Compressed libraries are expanded once into a cache outside the bundle (keyed by the archive's
# checksum), so the bundle itself stays small and may be read-only.
pf_xlib=""
for pf_f in "$pf_lib"/*.xz; do
  [[ -f $pf_f ]] || continue
  pf_name=$(basename "$pf_f" .xz)
  pf_xlib="${PF_BUNDLE_CACHE:-${TMPDIR:-/tmp}/pf_gpu_bundle_cache.$(id -u)}/$(cksum <"$PF_BUNDLE/lib/SUMS" | cut -d' ' -f1)"
  mkdir -p "$pf_xlib"
  if [[ ! -s "$pf_xlib/$pf_name" ]]; then
    if command -v xz >/dev/null; then
      xz -dc "$pf_f" >"$pf_xlib/$pf_name.tmp.$$"
    else
      python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$pf_f" "$pf_xlib/$pf_name.tmp.$$"
    fi
    mv "$pf_xlib/$pf_name.tmp.$$" "$pf_xlib/$pf_name"
  fi
done
# CUDA libraries: the toolkit's usual places, then pip wheels (nvidia-cublas, nvidia-nccl, ... as
# installed with PyTorch). Only folders holding one of the libraries the binaries need are added.
pf_cuda_dirs=()
pf_has_cuda_lib() {
  local d=$1 n
  while read -r n; do [[ -n $n && -e "$d/$n" ]] && return 0; done <"$PF_BUNDLE/cuda_libs.txt"
  return 1
}
pf_add_cuda_dir() {  # once per real folder
  local real e
  [[ -d $1 ]] && pf_has_cuda_lib "$1" || return 0
  real=$(readlink -f "$1")
  for e in "${pf_cuda_dirs[@]}"; do [[ $(readlink -f "$e") == "$real" ]] && return 0; done
  pf_cuda_dirs+=("$1")
}
for pf_d in ${CUDA_HOME:+$CUDA_HOME/lib64} ${CUDA_PATH:+$CUDA_PATH/lib64} /usr/local/cuda/lib64 \
  /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64; do
  pf_add_cuda_dir "$pf_d"
done
if command -v "${PYTHON:-python3}" >/dev/null; then
  while read -r pf_d; do
    [[ -n $pf_d ]] && pf_add_cuda_dir "$pf_d"
  done < <("${PYTHON:-python3}" - 2>/dev/null <<'PYEOF'
import glob, importlib.util, os
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations if spec else []):
    for d in sorted(set(os.path.dirname(p) for p in glob.glob(os.path.join(base, "**", "lib*.so*"), recursive=True))):
        print(d)
PYEOF
)
fi
pf_path="$pf_lib${pf_xlib:+:$pf_xlib}"
for pf_d in "${pf_cuda_dirs[@]}"; do pf_path="$pf_path:$pf_d"; done
export LD_LIBRARY_PATH="$pf_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pf_unresolved() { for pf_b in "$PF_BUNDLE"/bin/*; do ldd "$pf_b" 2>&1 | grep 'not found' | sed "s|^|$(basename "$pf_b"): |"; done; }
# The machine's own libstdc++ / libgcc_s / libcrypto win unless missing or too old.
if [[ -n $(pf_unresolved) ]]; then
  export LD_LIBRARY_PATH="$pf_lib/fallback:$LD_LIBRARY_PATH"
fi
PF_BUNDLE_PROBLEMS=$(pf_unresolved | sort -u)
export PF_BUNDLE_PROBLEMS
unset pf_f pf_name pf_d pf_path pf_b
ENVEOF

size_bytes=$(du -sb "$bundle" | cut -f1)
size_mib=$(awk -v b="$size_bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "== gpu_bundle/: $(wc -l <"$bundle/tests.txt") test binaries + benchmark, $(ls "$bundle/lib" | grep -c '\.so') libraries (+ $(ls "$bundle/lib/fallback" | wc -l) fallback), ${size_mib} MiB"
if [[ -s "$work/tests.failed" ]]; then
  echo "   left out (failed to build here):"
  sed 's/^/     /' "$work/tests.failed"
fi
du -sh "$bundle"
if [[ $size_bytes -gt $((max_mib * 1024 * 1024)) ]]; then
  echo "gpu_bundle: ${size_mib} MiB is over the ${max_mib} MiB limit" >&2
  exit 1
fi

#!/usr/bin/env bash
# Builds and runs the micro-benchmarks (bench/): GEMM GFLOP/s at the GPT's shapes and one
# TransformerBlock's forward/backward tokens/s and GFLOP/s, BLAS on one thread.
#   tools/bench.sh                                  # everything
#   tools/bench.sh --benchmark_filter='d256'        # extra arguments go to both benchmarks
#   BAZEL="bazel --output_base=/tmp/mine" tools/bench.sh
# Rates use CPU time, so a busy machine lowers them less than it lowers the wall times.
set -euo pipefail
cd "$(dirname "$0")/.."

read -r -a bazel <<<"${BAZEL:-bazel}"
benchmarks=(gemm_bench gpt_block_bench)
targets=()
for b in "${benchmarks[@]}"; do targets+=("//bench:$b"); done

"${bazel[@]}" build -c opt --ui_event_filters=-info --noshow_progress "${targets[@]}"
bin=$("${bazel[@]}" info -c opt bazel-bin 2>/dev/null)

export OMP_NUM_THREADS=1  # pf::cpu::set_blas_threads_for_this_thread(1) is also called per benchmark
for b in "${benchmarks[@]}"; do
  echo "== $b (BLAS threads: 1; GFLOP/s and tokens/s per CPU second)"
  "$bin/bench/$b" --benchmark_min_time="${BENCH_MIN_TIME:-0.2}" "$@"
  echo
done

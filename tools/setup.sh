#!/usr/bin/env bash
# Installs everything the build, the samples and the tests need, from Debian's archive and PyPI.
# Idempotent: when everything is present it only checks (dpkg-query, one python import) and exits.
# Run as root (CI does) or with sudo available. Quiet unless something is installed or fails.
#
# What it does NOT install: the CUDA toolkit in /usr/local/cuda (present on these machines; the
# build links against it but nothing needs a GPU).
set -euo pipefail

# Debian packages, one per line with the reason.
DEBIAN_PACKAGES=(
  bazel-bootstrap          # Bazel 4.2.3 (WORKSPACE style), the build tool
  bazel-skylib
  build-essential          # g++, ar, make
  binutils                 # nm/objdump: the exported-symbol test of the C API
  libopenblas-openmp-dev   # the BLAS we link (OpenMP build: per-thread thread counts)
  libopenblas-dev
  nlohmann-json3-dev       # model JSON, checkpoint headers, CLI --json
  libgtest-dev             # googletest
  libbenchmark-dev         # Google Benchmark (bench/)
  libcli11-dev             # the pipeforge command line
  libssl-dev               # SHA-256 (checkpoints, parameter checksums)
  swig                     # bindings (Python, Java, Go)
  python3-dev
  python3-venv             # tests/packaging: the wheel in a fresh virtual environment (Debian's python3)
  python3-numpy
  openjdk-17-jdk-headless  # Java binding: javac/jar/java (Bazel's Java rules are not used)
  junit4                   # Java binding tests
  golang-go                # Go binding tests (cgo)
  valgrind                 # memory checks
  libopenmpi-dev           # one process per rank: MPI transport and World (runtime/comm)
  openmpi-bin              # mpirun (tests and `mpirun -np N pipeforge train`)
  pkg-config               # the installed C library's pipeforge.pc (tests/packaging, the Go module's cgo flags)
  unzip                    # tests/packaging: the jar's manifest
  libglpk-dev              # GLPK's MILP solver (static libglpk.a): the exact schedule solver, runtime/schedules/optimal_schedule
  protobuf-compiler        # protoc: the Chakra execution-trace schema (runtime/gpu_model/chakra)
  libprotobuf-dev          # libprotobuf.a, linked statically: writing and reading Chakra traces
  libltdl-dev              # libltdl.a and zlib1g-dev's libz.a: what the static libglpk.a links against
  zlib1g-dev
)

# Installed when the archive has them; a machine without them skips the tests that need them.
OPTIONAL_DEBIAN_PACKAGES=(
  chromium                 # tests/cli:compare_cli_test renders `pipeforge compare --html` headless
)

# tools/setup.sh --fuzz (tools/fuzz.sh calls it): also clang with libFuzzer and the sanitizer runtimes.
if [[ " $* " == *" --fuzz "* ]]; then
  DEBIAN_PACKAGES+=(
    clang-14                 # the fuzz build's compiler (bazel --config=fuzz)
    libclang-rt-14-dev       # libFuzzer, ASan, UBSan runtimes (-fsanitize=fuzzer,address,undefined)
    llvm-14                  # llvm-symbolizer: file:line in fuzzer stack traces
  )
fi

# Python modules the Python binding and its tests import, for the python3 on PATH (here a pyenv
# build, which does not see Debian's dist-packages). Format: "import_name pip_requirement".
PIP_MODULES=(
  "numpy numpy"
)

log() { printf 'setup: %s\n' "$*" >&2; }

as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    log "need root to run: $*"
    exit 1
  fi
}

missing_debian_packages() {
  local pkg status
  for pkg in "${@:-${DEBIAN_PACKAGES[@]}}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [[ $status == installed ]] || printf '%s\n' "$pkg"
  done
}

mapfile -t missing < <(missing_debian_packages)
if ((${#missing[@]} > 0)); then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Update the package lists only when something has to be installed (and retry once after an
  # update if an install from the existing lists fails, e.g. because they are stale or absent).
  if ! as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/pf-setup-apt.log 2>&1; then
    as_root apt-get update -qq >>/tmp/pf-setup-apt.log 2>&1
    if ! as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/pf-setup-apt.log 2>&1; then
      tail -n 30 /tmp/pf-setup-apt.log >&2
      log "apt-get install failed (full log: /tmp/pf-setup-apt.log)"
      exit 1
    fi
  fi
  mapfile -t still_missing < <(missing_debian_packages)
  if ((${#still_missing[@]} > 0)); then
    log "still missing after install: ${still_missing[*]}"
    exit 1
  fi
fi

mapfile -t optional_missing < <(missing_debian_packages "${OPTIONAL_DEBIAN_PACKAGES[@]}")
if ((${#optional_missing[@]} > 0)); then
  log "installing optional Debian packages: ${optional_missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! as_root apt-get install -y -qq --no-install-recommends "${optional_missing[@]}" >/tmp/pf-setup-apt.log 2>&1; then
    log "could not install ${optional_missing[*]} (/tmp/pf-setup-apt.log): the tests that need them skip themselves"
  fi
fi

# The Go toolchain from golang-go lives in /usr/lib/go/bin with /usr/bin/go a symlink; nothing to do.

PYTHON=${PYTHON:-python3}
if command -v "$PYTHON" >/dev/null 2>&1; then
  pip_missing=()
  for entry in "${PIP_MODULES[@]}"; do
    module=${entry%% *}
    requirement=${entry#* }
    "$PYTHON" -c "import $module" >/dev/null 2>&1 || pip_missing+=("$requirement")
  done
  if ((${#pip_missing[@]} > 0)); then
    log "installing Python packages for $("$PYTHON" -c 'import sys; print(sys.executable)'): ${pip_missing[*]}"
    if ! PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install -q --disable-pip-version-check \
        "${pip_missing[@]}" >/tmp/pf-setup-pip.log 2>&1; then
      tail -n 30 /tmp/pf-setup-pip.log >&2
      log "pip install failed (full log: /tmp/pf-setup-pip.log)"
      exit 1
    fi
  fi
else
  log "no $PYTHON on PATH; skipping Python packages"
fi

# Sourced by bench/glm/run.sh and elastic_net.sh: $quick (1 when the script got --quick), the benchmark venv ($python, bench/glm/setup.sh),
# `pipeforge` built ($pipeforge), the data cache ($data: $PIPEFORGE_GLM_DATA, default
# ${XDG_CACHE_HOME:-~/.cache}/pipeforge/glm-data), a work folder removed on exit ($work), and
# `data_set KIND ROWS COLS DENSITY TASK`, which makes the set once (rows scaled to unit norm, as
# LIBSVM's own data sets are) and prints its path.
quick=0
[[ ${1:-} == --quick ]] && quick=1
python=$(bench/glm/setup.sh)
bazel build --ui_event_filters=-info --noshow_progress //:pipeforge >&2
pipeforge=$PWD/bazel-bin/pipeforge
data=${PIPEFORGE_GLM_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeforge/glm-data}
mkdir -p "$data"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
threads=2

data_set() {
  local file="$data/$1-$2-$3-$4.svm"
  if [[ ! -s $file ]]; then
    "$python" bench/glm/make_data.py --rows "$2" --cols "$3" --density "$4" --task "$5" \
      --normalize --out "$file.tmp" && mv "$file.tmp" "$file"
  fi
  echo "$file"
}

#!/usr/bin/env bash
# scripts/gpu_check.sh: every check that needs a GPU, in one call on the GPU image (docs/testing.md,
# "On a GPU machine"). Run from anywhere in the repository; it works from the repository root.
#
#   bash scripts/gpu_check.sh             on a machine with an NVIDIA GPU (no GPU: exits 2 at once)
#   bash scripts/gpu_check.sh --dry-run   anywhere: the installs, the versions and the doctor only;
#                                         the GPU steps are reported as 'skipped: --dry-run'
#
# Steps, each under its own timeout and inside one time budget (GPU_CHECK_BUDGET_S, 480 s), none
# stopping the others: install every distribution of the repository editable (no build isolation,
# no dependencies, no index: the image has them; wheels carried in .whl/ first), check what they
# need, print the GPU/driver/torch/CUDA versions and `opcore doctor --deep`, then the GPU-marked
# tests, the conformance kit against cuda, bench/cuda.py, bench/graph.py --device cuda, and
# bench/generate.py --device cuda (the small model) where it exists.
#
# Output: one file per group of steps under $OUT (a new temporary folder where OUT is unset), and
# one summary line per step (passed / failed / skipped, with the reason) on stdout and in
# $OUT/summary.txt. Exit status: 0 no step failed, 1 a step failed, 2 no GPU (without --dry-run),
# 64 a bad argument. PYTHON (python3) is the interpreter whose environment is installed into.
set -u -o pipefail # no -e: a step that fails must not stop the others

usage() {
    sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

DRY_RUN=0
for arg in "$@"; do
    case $arg in
    --dry-run) DRY_RUN=1 ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "gpu_check.sh: unknown argument '$arg'; expected --dry-run or --help" >&2
        exit 64
        ;;
    esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
PYTHON=${PYTHON:-python3}
BUDGET_S=${GPU_CHECK_BUDGET_S:-480}
RESERVE_S=15 # kept back from the budget for writing the summary

# a GPU is visible where nvidia-smi lists one (no torch import: the answer comes at once)
NO_GPU_REASON=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
    NO_GPU_REASON="nvidia-smi is not on the PATH"
elif ! LISTED=$(timeout 30 nvidia-smi -L 2>&1); then
    NO_GPU_REASON="nvidia-smi -L failed: ${LISTED%%$'\n'*}"
elif ! grep -q '^GPU ' <<<"$LISTED"; then
    NO_GPU_REASON="nvidia-smi -L lists no GPU"
fi
if [[ -n $NO_GPU_REASON && $DRY_RUN == 0 ]]; then
    echo "gpu_check.sh: no GPU here ($NO_GPU_REASON): its checks need an NVIDIA GPU. Run it on the GPU" \
        "machine through the device tool (docs/testing.md, \"On a GPU machine\"), or pass --dry-run to run" \
        "only the steps that need none (the installs, the versions, the doctor)." >&2
    exit 2
fi

if [[ -z ${OUT:-} ]]; then
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 1
fi
mkdir -p "$OUT" || exit 1
# at most 8 files come back from the device machine: the steps are grouped into these
FILES=(install.log env.txt pytest-gpu.log conformance-cuda.log bench-cuda.txt bench-graph-cuda.txt
    bench-generate-cuda.txt summary.txt)
for file in "${FILES[@]}"; do : >"$OUT/$file"; done

export PYTHONUNBUFFERED=1 # a step killed at its timeout still leaves what it printed
export PYTHONFAULTHANDLER=1 # a step that crashes (a segmentation fault) leaves its Python stack
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
START=$SECONDS
FAILED=0

join_lines() { # stdin's lines as one, joined by '; '
    awk 'NR > 1 { printf "; " } { printf "%s", $0 }'
}

summary() { # summary NAME TEXT: one line on stdout and in summary.txt
    echo "$1: $2" >>"$OUT/summary.txt"
    echo "[gpu_check] $1: $2"
}

skip_step() { # skip_step NAME FILE REASON
    echo "### $1: skipped: $3" >>"$OUT/$2"
    summary "$1" "skipped: $3"
}

# run_step NAME FILE LIMIT_S COMMAND...: COMMAND under `timeout`, its output appended to $OUT/FILE.
# STEP_PATTERN (an extended regex, optional): the output lines that match it are added to the summary
# line (pytest's closing line, the kit's cuda coverage line). A failed step's last lines go to stdout.
run_step() {
    local name=$1 file=$2 limit=$3
    shift 3
    local left=$((BUDGET_S - (SECONDS - START) - RESERVE_S))
    if ((left < 10)); then
        skip_step "$name" "$file" "out of time (the ${BUDGET_S} s budget, GPU_CHECK_BUDGET_S, is spent)"
        return
    fi
    ((limit > left)) && limit=$left
    local log started=$SECONDS rc=0 status detail=""
    log=$(mktemp) || return
    echo "### $name: $* (timeout ${limit} s)" >>"$OUT/$file"
    timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null || rc=$?
    cat "$log" >>"$OUT/$file"
    echo >>"$OUT/$file"
    if [[ -n ${STEP_PATTERN:-} ]]; then
        detail=$(grep -E -- "$STEP_PATTERN" "$log" | sed -E 's/^=+ //; s/ =+$//; s/^ +//; s/ {2,}/ /g' | join_lines)
    fi
    local took=$((SECONDS - started))
    if ((rc == 0)); then
        status="passed (${took} s${detail:+; $detail})"
    else
        FAILED=1
        if ((rc == 124 || rc == 137)); then
            status="failed: timed out after ${limit} s${detail:+; $detail} (see $file)"
        else
            status="failed: exit status $rc after ${took} s${detail:+; $detail} (see $file)"
        fi
        echo "[gpu_check] $name: the last lines of its output:"
        tail -n 15 "$log" | sed 's/^/    /'
    fi
    rm -f "$log"
    summary "$name" "$status"
}

# --- install: the carried wheels, then every distribution of the repository, editable --------------
install_wheels() {
    local wheels=()
    if [[ -d .whl ]]; then
        shopt -s nullglob
        wheels=(.whl/*.whl)
        shopt -u nullglob
    fi
    if ((${#wheels[@]} == 0)); then
        skip_step "install .whl" install.log "no wheel carried (no .whl/*.whl): the image's packages as they are"
        return
    fi
    local names
    names=$(printf '%s\n' "${wheels[@]##*/}" | join_lines)
    STEP_PATTERN="^ERROR" run_step "install .whl ($names)" install.log 120 \
        "$PYTHON" -m pip install --no-index --no-deps "${wheels[@]}"
}

install_distributions() {
    local dists=(.) pyproject
    for pyproject in opcore_*/pyproject.toml plugins/*/pyproject.toml; do
        [[ -f $pyproject ]] && dists+=("${pyproject%/pyproject.toml}")
    done
    local dist
    for dist in "${dists[@]}"; do
        # the core compiles opcore._fastrun and opcore._torchguard (against this torch) in place
        STEP_PATTERN="^ERROR" run_step "install -e $dist" install.log 240 \
            "$PYTHON" -m pip install --no-index --no-deps --no-build-isolation --check-build-dependencies -e "$dist"
    done
}

# what opcore's distributions need that this environment lacks (pip check, opcore's lines only: the
# image's own packages are not ours to judge). openvino is expected to be missing on the GPU image.
check_needs() {
    local report rc=0
    report=$(timeout 60 "$PYTHON" -m pip check 2>&1) || rc=$?
    {
        echo "### requirements: $PYTHON -m pip check (opcore's lines)"
        echo "$report"
        echo
    } >>"$OUT/install.log"
    local ours others
    ours=$(grep -iE '^opcore' <<<"$report")
    others=$(grep -viE 'requires openvino' <<<"$ours")
    if [[ -z $ours ]]; then
        if ((rc == 0 || rc == 1)); then
            summary "requirements" "passed (every requirement of opcore's distributions is installed)"
        else
            FAILED=1
            summary "requirements" "failed: pip check exit status $rc (see install.log)"
        fi
    elif [[ -z $others ]]; then
        summary "requirements" "passed (only openvino is missing, as expected: the openvino backend is unavailable)"
    else
        FAILED=1
        summary "requirements" "failed: $(join_lines <<<"$others") (carry wheels in .whl/: docs/testing.md)"
    fi
}

# --- the versions and the doctor ----------------------------------------------------------------------
versions_and_doctor() {
    STEP_PATTERN="^digest: " run_step "versions" env.txt 60 "$PYTHON" scripts/gpu_check_versions.py
    STEP_PATTERN="^plugins +[0-9]+ found|^ +cuda +|^no problems found|^problem: " run_step "opcore doctor --deep" env.txt 90 \
        "$PYTHON" -m opcore.cli doctor --deep
}

# --- the GPU steps ------------------------------------------------------------------------------------
PYTEST_CLOSING='^(=+ )?[0-9]+ (passed|failed|skipped|deselected|errors?|warnings?)\b.* in [0-9.]+s'

gpu_step() { # gpu_step NAME FILE LIMIT_S COMMAND...: run_step, or skipped under --dry-run
    if ((DRY_RUN)); then
        skip_step "$1" "$2" "--dry-run"
    else
        run_step "$@"
    fi
}

bench_if_present() { # bench_if_present SCRIPT LIMIT_S ARGS...: SCRIPT --device cuda ARGS where the file exists
    local script=$1 limit=$2
    shift 2
    if [[ ! -f $script ]]; then
        skip_step "$script --device cuda" bench-generate-cuda.txt "$script not in this tree"
    else
        gpu_step "$script --device cuda $*" bench-generate-cuda.txt "$limit" "$PYTHON" "$script" --device cuda "$@"
    fi
}

gpu_steps() {
    STEP_PATTERN=$PYTEST_CLOSING gpu_step "pytest -m gpu" pytest-gpu.log 150 \
        "$PYTHON" -m pytest -m gpu -p no:benchmark
    STEP_PATTERN="$PYTEST_CLOSING|^cuda " gpu_step "conformance kit, cuda" conformance-cuda.log 180 \
        env NVIDIA_TF32_OVERRIDE=0 "$PYTHON" -m pytest -p opcore.testing.plugin --pyargs opcore.testing \
        --opcore-backend cuda -p no:benchmark
    gpu_step "bench/cuda.py" bench-cuda.txt 120 "$PYTHON" bench/cuda.py
    gpu_step "bench/graph.py --device cuda" bench-graph-cuda.txt 200 \
        "$PYTHON" bench/graph.py --device cuda --models llama,cnn --batches 1,8 --rounds 5
    # the small model only (compile's first calls of the larger ones outlast the budget), in two runs:
    # eager and opcore, then compile alone, so that one column's crash hides no other's figures
    bench_if_present bench/generate.py 100 --models small --rounds 3 --skip compile
    bench_if_present bench/generate.py 100 --models small --rounds 3 --skip static,opcore
}

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo "unknown (no git here)")
MODE=$( ((DRY_RUN)) && echo ", --dry-run" || echo "")
GPUS=$(sed -E 's/ \(UUID: [^)]*\)//' <<<"${LISTED:-}" | join_lines)
HEADER="gpu_check.sh at commit $COMMIT$MODE, $(date -u '+%Y-%m-%d %H:%M UTC'), ${GPUS:-no GPU ($NO_GPU_REASON)}"
echo "$HEADER" >>"$OUT/summary.txt"
echo "[gpu_check] $HEADER; output in $OUT"

install_wheels
install_distributions
check_needs
versions_and_doctor
gpu_steps

RESULT=$( ((FAILED)) && echo "a step failed" || echo "no step failed")
echo "total: $((SECONDS - START)) s, $RESULT" >>"$OUT/summary.txt"
echo
echo "== gpu_check summary ($OUT/summary.txt) =="
cat "$OUT/summary.txt"
exit "$FAILED"

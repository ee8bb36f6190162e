#!/usr/bin/env bash
# Side by side with htsim (issue 14, item 6): the permutation, the small-flow all-to-all, the
# incast and the chained ring all-reduce on a leaf-spine, htsim (perm / ecmp_host -paths 1 /
# ecmp_ar) against our packet and flow engines (spray / ecmp / adaptive), same flows and
# matched parameters (benchmarks/_htsim.py). Writes benchmarks/results/vs_htsim.json and prints
# it as the last line.
#
# htsim runs to -end = its first run's last completion + 1% (a flow unfinished there is an
# error). The flow engine's speed-ups: engine only per scenario (htsim's whole process / our
# engine call), and on the chained ECMP ring like for like: whole process against whole
# process (ours: benchmarks/_htsim_ours.py on the same .cm), warm caches, both writing to a
# file, 5 pairs launched in turn, median of the pair ratios with min and max. --quick: one
# ECMP hash draw per side in the table (never fewer pairs).
#   benchmarks/vs_htsim.sh HTSIM_DIR --pin tests/data/htsim   # recapture the pinned outputs
#
#   benchmarks/vs_htsim.sh HTSIM_DIR     # a Broadcom/csg-htsim build (root, sim/ or datacenter/)
#
# Building htsim (outside this repository; never copy its code here):
#   git clone <csg-htsim> /tmp/htsim   (sparse checkout without
#       experiments/fattree-all-to-all/sequential_512conns*, two files may be missing)
#   cd /tmp/htsim/sim && make -j2
# Without a build this says so and exits 0.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
dir="${1:-}"
if [[ -z "$dir" ]]; then
    echo "usage: benchmarks/vs_htsim.sh HTSIM_DIR (no htsim build given: nothing compared)" >&2
    exit 0
fi
found=""
for cand in "$dir" "$dir/datacenter" "$dir/sim/datacenter"; do
    if [[ -x "$cand/htsim_ndp" ]]; then found="$cand/htsim_ndp"; break; fi
done
if [[ -z "$found" ]]; then
    echo "no htsim build (htsim_ndp) under $dir: nothing compared" >&2
    exit 0
fi
py="$root/.venv/bin/python"
[[ -x "$py" ]] || py=python3
shift
exec "$py" "$here/_htsim.py" "$dir" "$@"

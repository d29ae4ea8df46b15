#!/bin/sh
# bench/run_training_bench.sh's smallest run (ResNet-18, 4 images of 32x32, one
# timed batch, two rounds, Python too), checked for a well-formed summary: one
# row per framework with positive rates and a scaling in range, the ratios to
# DDP, and training_results.py reads it.
#
#   tests/bench/training_bench_smoke.sh SOURCE_DIR BUILD_DIR
set -eu
source_dir=$1
build_dir=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$source_dir"
bench/run_training_bench.sh --build-dir "$build_dir" --python 1 --repeat 2 --model resnet18 --batch-size 4 \
  --image-size 32 --num-warmup-batches 1 --num-iters 1 --num-batches-per-iter 1 >"$out/summary.txt" 2>"$out/rounds.txt" ||
  { cat "$out/rounds.txt" >&2; echo "training_bench_smoke: run_training_bench.sh failed" >&2; exit 1; }
/usr/bin/python3 - "$out/summary.txt" "$out/rounds.txt" <<'PY'
import re, sys
summary = open(sys.argv[1]).read()
rounds = open(sys.argv[2]).read()
rows = {}
for line in summary.splitlines():
    m = re.match(r"^(\S.*?)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%$", line)
    if m:
        rows[m.group(1)] = [float(m.group(i)) for i in (2, 3, 4)]
expected = {"kolo", "PyTorch DDP (gloo)", "PyTorch DDP (gloo) tuned malloc", "two independent 1-worker jobs",
            "2 workers in lockstep, no gradients", "kolo.torch (Python)"}
assert set(rows) == expected, f"rows {sorted(rows)}"
# Each rate is one timed batch, taken beside other tests: a 1-worker run slowed
# by them puts a 2-worker scaling past 200 %. The bound catches a rate in the
# wrong unit, not noise.
for name, (one, two, scaling) in rows.items():
    assert one > 0 and two > 0, f"no throughput for {name}: {rows[name]}"
    assert 0 < scaling < 400, f"scaling out of range for {name}: {scaling}"
for ratio in ("kolo / DDP with 2 workers", "kolo.torch (Python) / DDP with 2 workers"):
    assert re.search(re.escape(ratio) + r": [0-9.]+x \([0-9.]+x against", summary), f"no '{ratio}' line"
assert "medians of 2 rounds" in summary, "no note of the rounds"
# Every configuration ran in both rounds, a framework's 1- and 2-worker runs
# back to back.
rounds_run = {}
for number, run in re.findall(r"^-- round (\d+): (.*)$", rounds, re.M):
    rounds_run.setdefault(number, []).append(run)
assert sorted(rounds_run) == ["1", "2"], f"rounds {sorted(rounds_run)}"
for number, runs in rounds_run.items():
    assert len(runs) == 10, f"round {number}: {len(runs)} runs"
    for run in runs:
        if re.search(r", [12] workers?$", run):
            framework = run.rsplit(",", 1)[0]
            at = [i for i, r in enumerate(runs) if r.rsplit(",", 1)[0] == framework]
            assert len(at) == 2 and at[1] == at[0] + 1, f"round {number}: {framework} ran at {at}"
print(f"training_bench_smoke: {len(rows)} rows well-formed")
PY
/usr/bin/python3 bench/training_results.py --input "$out/summary.txt" --out "$out/results" >/dev/null
grep -q '^kolo,2,' "$out/results/training.csv" ||
  { echo "training_bench_smoke: training_results.py found no kolo row" >&2; cat "$out/results/training.csv" >&2; exit 1; }

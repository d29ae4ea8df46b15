#!/usr/bin/python3
"""Turns the training benchmark's output (bench/run_training_bench.sh) into the
tables bench/plot.sh draws: throughput per framework and worker count, and the
scaling efficiency (throughput on N workers / (N x throughput on one)).

  bench/run_training_bench.sh | /usr/bin/python3 bench/training_results.py --out bench/results
  /usr/bin/python3 bench/training_results.py --input saved_output.txt

Understood lines (anything else is ignored):
  run_training_bench.sh's summary: a header "<model> img/sec  1 worker  2 workers
      scaling", then one row per framework: "<name>  <img/s>  <img/s>  <pct>%"
  RESULT,<framework>,<workers>,<images per second, all workers>
  Total img/sec on <N> worker(s): <X> [+-<Y>]   (Horovod's synthetic benchmark; the
      framework is the last "== <name>" or "### <name>" header line before it, or
      "kolo" when there is none)
"""

import argparse
import csv
import os
import re
import sys

RESULT = re.compile(r"^RESULT,([\w.+-]+),(\d+),([0-9.eE+-]+)\s*$")
HOROVOD = re.compile(r"Total img/sec on (\d+) worker\(s\):\s*([0-9.]+)")
HEADER = re.compile(r"^\s*(?:={2,}|#{3,})\s*([\w.+ -]+?)\s*(?:={2,}|#*)\s*$")
SUMMARY_HEADER = re.compile(r"img/sec\s+((?:\d+ workers?\s*)+)scaling")
SUMMARY_ROW = re.compile(r"^(\S.*?)\s+((?:[0-9.]+\s+)+)([0-9.]+)%\s*$")


def parse(lines):
    """(framework, workers) -> median img/s, and framework -> the summary's own
    scaling (a fraction) where the summary gives one."""
    samples = {}  # (framework, workers) -> [img/s]
    scaling = {}  # framework -> [the summary's scaling of its largest run]
    framework = "kolo"
    summary_workers = None  # worker counts of the summary table's columns, once seen
    for line in lines:
        if m := SUMMARY_HEADER.search(line):
            summary_workers = [int(w) for w in re.findall(r"(\d+) workers?", m.group(1))]
        elif summary_workers and (m := SUMMARY_ROW.match(line)):
            values = [float(v) for v in m.group(2).split()]
            # gnuplot reads the CSVs with ',' as the separator, quotes or not
            name = m.group(1).strip().replace(",", "")
            for n, x in zip(summary_workers, values):
                samples.setdefault((name, n), []).append(x)
            scaling.setdefault(name, []).append(float(m.group(3)) / 100)
        elif m := RESULT.match(line):
            samples.setdefault((m.group(1), int(m.group(2))), []).append(float(m.group(3)))
        elif m := HOROVOD.search(line):
            samples.setdefault((framework, int(m.group(1))), []).append(float(m.group(2)))
        elif m := HEADER.match(line):
            framework = m.group(1).strip().replace(" ", "-")
    median = lambda v: sorted(v)[len(v) // 2]  # of repeats
    return {key: median(v) for key, v in samples.items()}, {fw: median(v) for fw, v in scaling.items()}


def with_efficiency(results, scaling):
    """Efficiency against one worker; for the largest run the summary's own
    scaling where it gives one (run_training_bench.sh takes it within rounds,
    which a drifting machine moves less than a ratio of medians)."""
    rows = []
    for fw in sorted({f for f, _ in results}, key=lambda f: (f != "kolo", f)):
        points = sorted((n, x) for (f, n), x in results.items() if f == fw)
        base_n, base_x = points[0]
        per_worker = base_x / base_n  # one worker's throughput, or the smallest run's share
        for n, x in points:
            efficiency = x / (n * per_worker)
            if fw in scaling and n == points[-1][0] and n > base_n:
                efficiency = scaling[fw]
            rows.append({"framework": fw, "workers": n, "img_per_sec": x, "efficiency": efficiency})
    return rows


def write(rows, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "training.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["framework", "workers", "img_per_sec", "efficiency"])
        w.writeheader()
        w.writerows(rows)
    frameworks = list(dict.fromkeys(r["framework"] for r in rows))  # kolo first
    workers = sorted({r["workers"] for r in rows})
    by_key = {(r["framework"], r["workers"]): r for r in rows}
    with open(os.path.join(out, "training-wide.csv"), "w", newline="") as f:
        w = csv.writer(f)
        header = ["workers"]
        for fw in frameworks:
            header += [f"{fw} img/s", f"{fw} efficiency"]
        w.writerow(header)
        for n in workers:
            line = [n]
            for fw in frameworks:
                r = by_key.get((fw, n))
                line += [f"{r['img_per_sec']:.2f}", f"{r['efficiency']:.3f}"] if r else ["", ""]
            w.writerow(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", help="saved output of run_training_bench.sh (default: standard input)")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    text = open(args.input).read().splitlines() if args.input else sys.stdin.read().splitlines()
    results, scaling = parse(text)
    if not results:
        sys.exit("training_results.py: no throughput lines found")
    rows = with_efficiency(results, scaling)
    write(rows, args.out)
    print(f"{'framework':>16} {'workers':>8} {'img/s':>10} {'efficiency':>11}")
    for r in rows:
        print(f"{r['framework']:>16} {r['workers']:>8} {r['img_per_sec']:>10.1f} {r['efficiency']:>11.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Runs kolo (communicator alone and full API) and its peers (raw OpenMPI over
shared memory and over TCP, raw Gloo over TCP loopback) at the same sizes, for
each rank count, interleaved so that a change in the machine's load hits every
program alike. Prints per size the busbw of each and the ratio kolo / best peer,
and writes the raw results (JSON), a long CSV and one wide CSV per rank count
(bench/plot.sh draws those).

  /usr/bin/python3 bench/compare.py --build build --ranks 2,4 --max-bytes 256M

Each program prints one line of JSON (--json); see tools/kolo-bench/core/report.h.
"""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time

# kolo-comm and kolo-api time buffers kolo allocated (kolo::Buffers: shareable,
# so large allreduces run in place of them); the -plain variants time memory
# kolo did not allocate (aligned_alloc, as a tensor library's).
# kolo-tcp / kolo-gloo: the TCP communicators alone (KOLO_BACKEND=tcp / gloo, also
# on one host); kolo-api-tcp / kolo-api-gloo: the public API over them.
# Every kolo program's name starts with "kolo-"; the others are its peers.


def parse_bytes(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text[:-1] if scale != 1 else text) * scale


def sweep_sizes(min_bytes, max_bytes, factor):
    sizes, b = [], min_bytes
    while b <= max_bytes:
        sizes.append(b)
        b = max(b + 1, int(b * factor))
    return sizes


class Program:
    """One benchmark program and how to launch it with N ranks."""

    def __init__(self, name, argv_for, env=None):
        self.name = name
        self.argv_for = argv_for  # n -> argv prefix (launcher + binary + own flags)
        self.env = env  # extra environment variables


def find_programs(args):
    build = os.path.abspath(args.build)
    kolorun = os.path.join(build, "tools/kolorun/kolorun")
    kolo_bench = os.path.join(build, "tools/kolo-bench/kolo-bench")
    mpi_bench = os.path.join(build, "bench/mpi_bench")
    gloo_bench = os.path.join(build, "bench/gloo_bench")
    requested = args.programs.split(",")
    try:
        variants = [split_variant(name) for name in requested]
    except ValueError as e:
        sys.exit(f"compare.py: {e}")
    wanted = {base for base, _ in variants}
    programs = []

    def kolorun_argv(n, binary, *flags):
        launcher = [kolorun, "-np", str(n), "--no-tag-output", "--timeout", str(args.timeout)]
        if args.bind:
            # One core per rank, round robin, as mpirun binds its ranks by default,
            # also when they outnumber the cores (kolorun then leaves them unbound).
            # `nproc --all`: a rank kolorun bound sees only its own core in `nproc`.
            pin = 'exec taskset -c "$((KOLO_LOCAL_RANK % $(nproc --all)))" "$0" "$@"'
            return launcher + ["/bin/sh", "-c", pin, binary, *flags]
        return launcher + [binary, *flags]

    def mpirun_argv(n, transport):
        mca = ["--mca", "pml", "ob1"]
        if transport == "shm":
            mca += ["--mca", "btl", "self,vader"]
        else:  # TCP on loopback only, for data and for mpirun's own channel
            mca += ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
        return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), *mca, mpi_bench]

    def want(name, binary):
        if name not in wanted:
            return False
        if not os.access(binary, os.X_OK):
            print(f"# skipping {name}: {binary} is not built", file=sys.stderr)
            return False
        return True

    if want("kolo-comm", kolo_bench):
        programs.append(Program("kolo-comm", lambda n: kolorun_argv(n, kolo_bench, "--mode", "comm")))
    if want("kolo-comm-plain", kolo_bench):
        programs.append(Program("kolo-comm-plain",
                                lambda n: kolorun_argv(n, kolo_bench, "--mode", "comm", "--buffers", "plain")))
    if want("kolo-api", kolo_bench):
        programs.append(Program("kolo-api", lambda n: kolorun_argv(n, kolo_bench, "--mode", "api")))
    if want("kolo-api-plain", kolo_bench):
        programs.append(Program("kolo-api-plain",
                                lambda n: kolorun_argv(n, kolo_bench, "--mode", "api", "--buffers", "plain")))
    for backend in ("gloo", "tcp"):
        if want(f"kolo-{backend}", kolo_bench):
            programs.append(Program(f"kolo-{backend}", lambda n: kolorun_argv(n, kolo_bench, "--mode", "comm"),
                                    env={"KOLO_BACKEND": backend}))
        if want(f"kolo-api-{backend}", kolo_bench):
            programs.append(Program(f"kolo-api-{backend}", lambda n: kolorun_argv(n, kolo_bench, "--mode", "api"),
                                    env={"KOLO_BACKEND": backend}))
    have_mpirun = shutil.which("mpirun") is not None
    for transport in ("shm", "tcp"):
        name = f"mpi-{transport}"
        if name in wanted and not have_mpirun:
            print(f"# skipping {name}: mpirun is not on PATH", file=sys.stderr)
        elif want(name, mpi_bench):
            programs.append(Program(name, lambda n, t=transport: mpirun_argv(n, t)))
    short = {"ring": "ring", "halving-doubling": "hd", "ring-chunked": "ring-chunked", "bcube": "bcube"}
    for algorithm in args.gloo_algorithms.split(","):
        name = f"gloo-{short.get(algorithm, algorithm)}"
        if algorithm and want(name, gloo_bench) and (algorithm == "ring" or args.op == "allreduce"):
            programs.append(Program(name, lambda n, a=algorithm: kolorun_argv(n, gloo_bench, "--algorithm", a)))
    if not any(is_kolo(p.name) for p in programs):
        sys.exit("compare.py: kolo-bench is not built (cmake --build BUILD --target kolo-bench kolorun)")
    built = {p.name: p for p in programs}
    # In the order asked for; a variant is its base program with more environment.
    return [Program(name, built[base].argv_for, dict(built[base].env or {}, **settings))
            for name, (base, settings) in zip(requested, variants) if base in built]


def split_variant(name):
    """'kolo-tcp+KOLO_TCP_ROUND_BYTES=262144' -> ('kolo-tcp', {'KOLO_TCP_ROUND_BYTES': '262144'}):
    a program run with more environment, beside the plain one in the same run."""
    base, *settings = name.split("+")
    pairs = [s.split("=", 1) for s in settings]
    if any(len(p) != 2 or not p[0] for p in pairs):
        raise ValueError(f"'{name}': a variant is PROGRAM+NAME=VALUE[+NAME=VALUE...]")
    return base, dict(pairs)


def run_one(program, n, sizes, args):
    """Runs `program` for `sizes`; returns its parsed JSON or None."""
    flags = ["--op", args.op, "--sizes", ",".join(str(b) for b in sizes), "--warmup", str(args.warmup),
             "--iters", str(args.iters), "--budget-bytes", str(args.budget_bytes), "--json"]
    if args.check:
        flags.append("--check")
    argv = program.argv_for(n) + flags
    try:
        env = dict(os.environ, **program.env) if program.env else None
        done = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout + 30, env=env)
    except subprocess.TimeoutExpired:
        print(f"# {program.name} n={n} {sizes[0]}..{sizes[-1]} B: timed out", file=sys.stderr)
        return None
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode != 0 or not lines:
        print(f"# {program.name} n={n} failed ({done.returncode}): {done.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def rows_of(run, op):
    """The flat rows (one per size) of one program launch."""
    return [{"op": op, "ranks": run["ranks"], "program": run["program"], "round": run["round"],
             "bytes": r["bytes"], "time_us": r["time_us"], "median_us": r["median_us"], "min_us": r["min_us"],
             "algbw_gbps": r["algbw_gbps"], "busbw_gbps": r["busbw_gbps"], "wrong": r["wrong"]}
            for r in run["result"]["results"]]


def interleaved(programs, args):
    """(round index, chunk of sizes, program) in the order to run them: every program
    on a chunk, then the next chunk, the whole sweep --rounds times."""
    sizes = args.sizes or sweep_sizes(args.min_bytes, args.max_bytes, args.step_factor)
    chunks = [sizes[i:i + args.sizes_per_run] for i in range(0, len(sizes), args.sizes_per_run)]
    for round_index in range(args.rounds):
        for chunk_index, chunk in enumerate(chunks):
            # Rotate the order so that no program always runs first after a pause.
            shift = (chunk_index + round_index) % len(programs)
            for program in programs[shift:] + programs[:shift]:
                yield round_index, chunk, program


def collect(programs, args):
    rows, raw = [], []
    for n in args.ranks:
        for round_index, chunk, program in interleaved(programs, args):
            started = time.time()
            result = run_one(program, n, chunk, args)
            if result is None:
                continue
            raw.append({"program": program.name, "ranks": n, "round": round_index, "result": result})
            rows += rows_of(raw[-1], args.op)
            if args.verbose:
                print(f"# {program.name} n={n} {chunk[0]}..{chunk[-1]} B in {time.time() - started:.1f} s",
                      file=sys.stderr)
    return rows, raw


def busbw_of(row, stat, op, n):
    """busbw from the chosen statistic of the per-iteration times."""
    factor = {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(op, (n - 1) / n)
    t = row[f"{stat}_us"] if stat != "mean" else row["time_us"]
    return row["bytes"] / (t * 1e3) * factor if t > 0 else 0.0


def summarize(rows, args, key=lambda row: row["ranks"]):
    """Per key (the rank count): {bytes: {program: (busbw, time_us)}}, best over rounds."""
    table = {}
    for r in rows:
        cell = table.setdefault(key(r), {}).setdefault(r["bytes"], {})
        bw = busbw_of(r, args.stat, args.op, r["ranks"])
        t = r["time_us"] if args.stat == "mean" else r[f"{args.stat}_us"]
        cell.setdefault(r["program"], []).append((bw, t))
    # Several rounds: the best round (least disturbed by other load on the machine),
    # or the median round.
    for sizes in table.values():
        for cell in sizes.values():
            for name, samples in cell.items():
                samples.sort()
                cell[name] = samples[-1] if args.pick == "best" else samples[len(samples) // 2]
    return table


def is_kolo(name):
    return name.startswith("kolo-")


def ran_in(names, sizes):
    """Those of `names` with a result at some size of `sizes` ({bytes: {program: ...}})."""
    return [x for x in names if any(x in cell for cell in sizes.values())]


def print_tables(table, names, args, title=lambda key: f"{key} ranks"):
    """One busbw table per key of `table` (rank counts in order; other keys as given),
    with the programs that ran for that key."""
    keys = sorted(table) if all(isinstance(k, int) for k in table) else list(table)
    all_names = names
    for key in keys:
        sizes = table[key]
        names = ran_in(all_names, sizes)
        peers = [n for n in names if not is_kolo(n)]
        kolos = [n for n in names if is_kolo(n)]
        bound = ", kolo and gloo ranks bound to cores" if args.bind else ""
        print(f"\n## {args.op}, {title(key)}{bound}: busbw (GB/s) from the {args.stat} iteration time "
              f"({args.pick} of {args.rounds} round(s)); ratio = kolo / best peer")
        head = f"{'bytes':>11} " + " ".join(f"{x:>10}" for x in names) + f" {'best peer':>10}"
        head += "".join(f" {k + '/best':>15}" for k in kolos)
        print(head)
        for b in sorted(sizes):
            cell = sizes[b]
            line = f"{b:>11} " + " ".join(f"{cell[x][0]:>10.3f}" if x in cell else f"{'-':>10}" for x in names)
            best = max((cell[p][0] for p in peers if p in cell), default=0.0)
            line += f" {best:>10.3f}"
            for k in kolos:
                ratio = cell[k][0] / best if k in cell and best > 0 else float("nan")
                line += f" {ratio:>15.2f}"
            print(line)
        smallest = min(sizes)
        lat = " ".join(f"{x}={sizes[smallest][x][1]:.1f}" for x in names if x in sizes[smallest])
        print(f"# latency at {smallest} B ({args.stat}, us): {lat}")


def write_outputs(rows, raw, table, names, args, prefix="compare", stem=lambda key: f"n{key}", meta=None,
                  extra_columns=lambda key: {}):
    """PREFIX-<op>.json (the raw runs and `meta`), PREFIX-<op>.csv (every row) and,
    for plot.sh, per key of `table` PREFIX-<op>-<stem>.csv (busbw, GB/s) and
    ...-time.csv (us): a column per program, plus `extra_columns(key)` ({name: value})
    in the busbw table."""
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"{prefix}-{args.op}")
    with open(base + ".json", "w") as f:
        json.dump(dict({"op": args.op, "stat": args.stat, "ranks": args.ranks, "bind": args.bind}, **(meta or {}),
                       runs=raw), f)
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["op"])
        w.writeheader()
        w.writerows(rows)
    for key, sizes in table.items():
        here = ran_in(names, sizes)
        for suffix, index, fmt in (("", 0, "{:.6f}"), ("-time", 1, "{:.3f}")):
            extra = extra_columns(key) if index == 0 else {}
            with open(f"{base}-{stem(key)}{suffix}.csv", "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["bytes"] + here + list(extra))
                for b in sorted(sizes):
                    w.writerow([b] + [fmt.format(sizes[b][x][index]) if x in sizes[b] else "" for x in here] +
                               [fmt.format(v) for v in extra.values()])
    print(f"\n# wrote {base}.json, {base}.csv and {base}-<config>[-time].csv", file=sys.stderr)


def add_sweep_arguments(ap, max_bytes, step_factor, warmup, iters, budget, stat, timeout, out):
    """The flags compare.py and compare_hosts.py share, with each one's defaults."""
    ap.add_argument("--build", default="build", help="CMake build folder (build)")
    ap.add_argument("--op", default="allreduce",
                    choices=["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"])
    ap.add_argument("--sizes", default="", help="comma-separated sizes (e.g. 8,4K,64M) instead of the sweep below")
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default=max_bytes)
    ap.add_argument("--step-factor", type=float, default=step_factor)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--iters", type=int, default=iters)
    ap.add_argument("--budget-bytes", default=budget, help=f"cap iters x size per size ({budget})")
    ap.add_argument("--sizes-per-run", type=int, default=4, help="sizes per program launch (4)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the whole interleaved sweep (1)")
    ap.add_argument("--stat", default=stat, choices=["mean", "median", "min"],
                    help="iteration-time statistic (mean: nccl-tests; median resists load spikes; min is one rank's luckiest call, not a latency)")
    ap.add_argument("--pick", default="best", choices=["best", "median"],
                    help="with several --rounds: each program's best round per size, or its median round (best)")
    ap.add_argument("--check", action="store_true", help="also verify every result")
    ap.add_argument("--timeout", type=int, default=timeout, help=f"seconds per program launch ({timeout})")
    ap.add_argument("--out", default=out)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--from-json", help="re-summarize JSON files written earlier (comma-separated) instead of running")


def finish_sweep_arguments(args, tool):
    """Turns the size flags into bytes; exits naming `tool` when one is malformed."""
    try:
        args.sizes = [parse_bytes(x) for x in args.sizes.split(",")] if args.sizes else []
        args.min_bytes = parse_bytes(args.min_bytes)
        args.max_bytes = parse_bytes(args.max_bytes)
        args.budget_bytes = parse_bytes(args.budget_bytes)
    except ValueError as e:
        sys.exit(f"{tool}: malformed size: {e}")


def load_runs(paths):
    """The saved JSON files' runs, rounds renumbered after each other; and the last
    file's other fields."""
    raw, saved = [], {}
    for path in paths.split(","):
        with open(path) as f:
            saved = json.load(f)
        offset = 1 + max((run["round"] for run in raw), default=-1)
        raw += [dict(run, round=run["round"] + offset) for run in saved["runs"]]
    return raw, saved


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_arguments(ap, max_bytes="256M", step_factor=2.0, warmup=5, iters=20, budget="1G", stat="mean",
                        timeout=600, out="bench/results")
    ap.add_argument("--ranks", default="2,4", help="comma-separated rank counts (2,4)")
    ap.add_argument("--programs", default="kolo-comm,kolo-comm-plain,kolo-api,mpi-shm,mpi-tcp,gloo-ring,gloo-hd",
                    help="which to run, in this order; also kolo-tcp, kolo-gloo, kolo-api-tcp, kolo-api-gloo; "
                         "PROGRAM+NAME=VALUE runs PROGRAM with one more environment variable, beside the others")
    ap.add_argument("--gloo-algorithms", default="ring,halving-doubling")
    ap.add_argument("--bind", action="store_true",
                    help="bind each kolo and gloo rank to one core (taskset), as mpirun does with its ranks")
    args = ap.parse_args()
    args.ranks = [int(x) for x in args.ranks.split(",")]
    finish_sweep_arguments(args, "compare.py")

    if args.from_json:
        # Summarize saved results again (another --stat, several sessions' rounds
        # together), without running anything.
        raw, saved = load_runs(args.from_json)
        args.op = saved["op"]
        args.rounds = 1 + max(run["round"] for run in raw)
        args.bind = saved.get("bind", False)
        rows = [row for run in raw for row in rows_of(run, args.op)]
        names = list(dict.fromkeys(run["program"] for run in raw))
        programs = [Program(name, None) for name in names]
    else:
        programs = find_programs(args)
        print("# programs: " + ", ".join(p.name for p in programs), file=sys.stderr)
        rows, raw = collect(programs, args)
    if not rows:
        sys.exit("compare.py: no program produced results")
    table = summarize(rows, args)
    names = [p.name for p in programs]
    print_tables(table, names, args)
    write_outputs(rows, raw, table, names, args)
    exit_if_wrong(rows, "compare.py")


def exit_if_wrong(rows, tool):
    wrong = sum(r["wrong"] or 0 for r in rows)
    if wrong:
        sys.exit(f"{tool}: {wrong} wrong elements reported")


if __name__ == "__main__":
    main()

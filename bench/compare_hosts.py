#!/usr/bin/python3
"""compare.py across hosts: kolo and its peers over TCP between network-namespace
hosts (bench/netns_hosts.py) joined by a bridge, with links unshaped or shaped by
tbf in both directions, interleaved in one run.

  /usr/bin/python3 bench/compare_hosts.py --build build --layouts 2x1,3x1,4x1,2x2 \\
      --links none,1gbit,10gbit --rounds 2 --out OUT

A layout HxR is H hosts with R ranks each. For each link and layout the hosts are
made once; then every program runs each chunk of sizes in turn (rotating which
goes first), and the whole sweep repeats --rounds times. Every launcher starts
inside host 0:

  kolo-tcp, kolo-api-tcp  kolo-bench --mode comm / api with KOLO_BACKEND=tcp (flat)
  kolo-hier, kolo-api-hier  the same with the hierarchical composition (shared memory
                          inside a host, tcp across; KOLO_HIERARCHICAL=1); layouts
                          with R > 1 only
  kolo-gloo               KOLO_BACKEND=gloo (not run unless asked for)
  mpi-tcp                 mpi_bench under mpirun --mca btl tcp,self (also between
                          the ranks of one host), entering hosts through
                          bench/netns_rsh_agent.sh; with more ranks than cores,
                          --mca mpi_yield_when_idle 1 (as it sets itself when it
                          sees one host oversubscribed)
  gloo-ring, gloo-hd      bench/gloo_bench --algorithm ring / halving-doubling

kolo and Gloo run under kolorun --launcher-command 'bench/netns_exec.sh {host}'
--network-interface nic0. Every rank is left unbound (kolorun --bind-to none,
mpirun --bind-to none): the hosts share this machine's cores, and per-host
binding would stack every host's first rank on the same core; with --cpus
spread each host's processes run on a core of its own instead.

Prints compare.py's busbw tables per link and layout, then each program's share
of the link-rate bound: an allreduce of S bytes must move at least 2(H-1)/H x S
over each host's link in each direction, so busbw (which counts 2(n-1)/n x S for
n = H x R ranks) is at most rate x (2(n-1)/n) / (2(H-1)/H); that is the link rate
for one rank per host. Writes hosts-<op>.json/.csv and, for bench/plot.sh,
hosts-<op>-<link>-<layout>[-time].csv (with the bound as a column).
"""

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import netns_hosts  # noqa: E402

DEFAULT_PROGRAMS = "kolo-tcp,kolo-api-tcp,kolo-hier,kolo-api-hier,mpi-tcp,gloo-ring"
EXTRA_PROGRAMS = ["kolo-gloo", "gloo-hd"]
AGENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns_rsh_agent.sh")
NETNS_EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns_exec.sh")


def parse_layouts(text):
    layouts = []
    for word in text.split(","):
        try:
            hosts, ranks = (int(x) for x in word.lower().split("x"))
        except ValueError:
            sys.exit(f"compare_hosts.py: a layout is HOSTSxRANKS (e.g. 2x1), got '{word}'")
        if not (2 <= hosts <= 16 and 1 <= ranks <= 8):
            sys.exit(f"compare_hosts.py: layout {word}: 2 to 16 hosts of 1 to 8 ranks")
        layouts.append((hosts, ranks))
    return layouts


def parse_links(text):
    links = []
    for word in text.split(","):
        if word in ("none", "unshaped"):
            links.append(None)
            continue
        try:
            netns_hosts.parse_rate(word)
        except ValueError as e:
            sys.exit(f"compare_hosts.py: --links: {e}, or none")
        links.append(word)
    return links


def link_name(link):
    return link or "unshaped"


def layout_name(layout):
    return f"{layout[0]}x{layout[1]}"


def bound_gbps(link, layout):
    """The link-rate bound of busbw (GB/s) for an allreduce, or None when unshaped."""
    if link is None:
        return None
    hosts, ranks = layout
    n = hosts * ranks
    return netns_hosts.parse_rate(link) / 8e9 * (2 * (n - 1) / n) / (2 * (hosts - 1) / hosts)


class Tools:
    def __init__(self, build):
        build = os.path.abspath(build)
        self.kolorun = os.path.join(build, "tools/kolorun/kolorun")
        self.kolo_bench = os.path.join(build, "tools/kolo-bench/kolo-bench")
        self.mpi_bench = os.path.join(build, "bench/mpi_bench")
        self.gloo_bench = os.path.join(build, "bench/gloo_bench")


def programs_for(wanted, tools, hosts, layout, args):
    """compare.Program objects for this layout on these hosts (argv_for ignores n)."""
    count, ranks = layout
    host_list = ",".join(f"{name}:{ranks}" for name in hosts.names)
    total = count * ranks

    def kolorun(binary, *flags):
        return hosts.exec_prefix(0) + [
            tools.kolorun, "--launcher-command", f"{NETNS_EXEC} {{host}}", "-H", host_list, "--network-interface",
            hosts.interface, "--bind-to", "none", "--no-tag-output", "--timeout", str(args.timeout), binary, *flags]

    # Open MPI spins while it waits unless it knows the node is oversubscribed, which
    # it judges per host; the namespace hosts share this machine's cores, so with
    # more ranks than cores its spinning ranks would take whole scheduler slices
    # from the ranks they wait for (milliseconds per 8-byte call).
    yield_when_idle = ["--mca", "mpi_yield_when_idle", "1"] if total > (os.cpu_count() or 1) else []

    def mpirun():
        return hosts.exec_prefix(0) + [
            "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(total), "-H", host_list, "--bind-to",
            "none", "--mca", "plm_rsh_agent", AGENT, "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca",
            "btl_tcp_if_include", hosts.interface, "--mca", "oob_tcp_if_include", hosts.interface,
            # Its daemons' default routing tree sometimes fails to wire up 4 hosts
            # started at once ("set the MCA param routed=direct"); data paths are not
            # affected.
            "--mca", "routed", "direct", *yield_when_idle, tools.mpi_bench]

    # kolo-bench's mode and environment, and gloo_bench's algorithm, per program.
    kolo = {"kolo-tcp": ("comm", {"KOLO_BACKEND": "tcp"}), "kolo-api-tcp": ("api", {"KOLO_BACKEND": "tcp"}),
            "kolo-hier": ("comm", {"KOLO_BACKEND": "tcp", "KOLO_HIERARCHICAL": "1"}),
            "kolo-api-hier": ("api", {"KOLO_BACKEND": "tcp", "KOLO_HIERARCHICAL": "1"}),
            "kolo-gloo": ("comm", {"KOLO_BACKEND": "gloo"})}
    gloo = {"gloo-ring": "ring", "gloo-hd": "halving-doubling"}

    def make(base):
        if base in kolo:
            mode, env = kolo[base]
            return compare.Program(base, lambda n: kolorun(tools.kolo_bench, "--mode", mode), dict(env))
        if base in gloo:
            return compare.Program(base, lambda n: kolorun(tools.gloo_bench, "--algorithm", gloo[base]))
        return compare.Program(base, lambda n: mpirun())

    programs = []
    for name in wanted:
        base, settings = compare.split_variant(name)
        if base.startswith("kolo-") and "hier" in base and ranks == 1:
            continue  # one rank per host: nothing to compose
        if base == "gloo-hd" and args.op != "allreduce":
            continue
        program = make(base)
        # NETNS_*: where netns_exec.sh (kolorun's launcher, mpirun's agent) puts each host.
        program.name, program.env = name, dict(hosts.environment(), **(program.env or {}), **settings)
        programs.append(program)
    return programs


def check_tools(wanted, tools):
    """The wanted programs whose binaries exist; says which are skipped and why."""
    for binary in (tools.kolorun, tools.kolo_bench):
        if not os.access(binary, os.X_OK):
            sys.exit(f"compare_hosts.py: {binary} is not built (cmake --build BUILD --target kolorun kolo-bench)")
    binaries = {"mpi-tcp": tools.mpi_bench, "gloo-ring": tools.gloo_bench, "gloo-hd": tools.gloo_bench}
    kept = []
    for name in wanted:
        base = compare.split_variant(name)[0]
        if base in binaries and not os.access(binaries[base], os.X_OK):
            print(f"# skipping {name}: {binaries[base]} is not built", file=sys.stderr)
        elif base == "mpi-tcp" and shutil.which("mpirun") is None:
            print(f"# skipping {name}: mpirun is not on PATH", file=sys.stderr)
        else:
            kept.append(name)
    return kept


def measure(args, links, layouts, wanted):
    tools = Tools(args.build)
    wanted = check_tools(wanted, tools)
    rows, raw, names = [], [], []
    for link in links:
        for layout in layouts:
            label = f"{link_name(link)} {layout_name(layout)}"
            with netns_hosts.Hosts(layout[0], rate=link, burst=args.burst, latency=args.latency,
                                   mtu=args.mtu, cpus=args.cpus) as hosts:
                programs = programs_for(wanted, tools, hosts, layout, args)
                names = [w for w in wanted if w in names or w in (p.name for p in programs)]
                n = layout[0] * layout[1]
                shaping = hosts.shaping(0)
                for round_index, chunk, program in compare.interleaved(programs, args):
                    started = time.time()
                    before = hosts.all_counters()
                    cpu = busy_cpu_seconds()
                    result = compare.run_one(program, n, chunk, args)
                    cpu = busy_cpu_seconds() - cpu
                    wall = time.time() - started
                    moved = netns_hosts.counter_delta(before, hosts.all_counters())
                    left = hosts.kill_all()
                    if left:
                        print(f"# {program.name} {label}: killed {left} process(es) it left in the hosts",
                              file=sys.stderr)
                    if result is None:
                        continue
                    raw.append({"program": program.name, "ranks": n, "round": round_index,
                                "link": link_name(link), "layout": layout_name(layout),
                                "burst": shaping["burst"] if shaping else None,
                                "host_bytes_sent": [m["tx_bytes"] for m in moved],
                                "busy_cpu_seconds": cpu, "wall_seconds": wall, "result": result})
                    rows += rows_with_config(raw[-1], args.op)
                    if args.verbose:
                        print(f"# {program.name} {label} {chunk[0]}..{chunk[-1]} B in {time.time() - started:.1f} s; "
                              f"host 0 sent {moved[0]['tx_bytes']} B", file=sys.stderr)
    return rows, raw, names


def busy_cpu_seconds():
    """Seconds this machine's CPUs spent on anything but idle and the user time of
    niced processes (/proc/stat: user, system, irq, softirq, steal): the program's
    ranks, launchers and the network work they cause, wherever it runs (Open MPI's
    daemons leave the process tree, so the launcher's own accounting misses them),
    and also whatever else runs at nice 0 or below at the same time."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, _nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def rows_with_config(run, op):
    return [dict(row, link=run["link"], layout=run["layout"]) for row in compare.rows_of(run, op)]


def key_of(row):
    return f"{row['link']}-{row['layout']}"


def config_of(key):
    link, layout = key.rsplit("-", 1)
    hosts, ranks = (int(x) for x in layout.split("x"))
    return (None if link == "unshaped" else link), (hosts, ranks)


def title(key):
    link, (hosts, ranks) = config_of(key)
    return f"{hosts} hosts x {ranks} rank(s), link {link_name(link)}"


def print_bound_shares(table, names, args):
    """Each program's busbw as a share of the link-rate bound, from 1 MiB up."""
    for key, sizes in table.items():
        link, layout = config_of(key)
        bound = bound_gbps(link, layout)
        if bound is None or max(sizes) < 1 << 20:
            continue
        print(f"\n## {args.op}, {title(key)}: share of the link-rate bound ({bound:.3f} GB/s busbw)")
        print(f"{'bytes':>11} " + " ".join(f"{x:>13}" for x in names))
        for b in sorted(sizes):
            if b < 1 << 20:
                continue
            cell = sizes[b]
            print(f"{b:>11} " + " ".join(f"{100 * cell[x][0] / bound:>12.0f}%" if x in cell else f"{'-':>13}"
                                         for x in names))


def print_cores(raw, names):
    """How many of the machine's cores each program kept busy (its processes' CPU
    seconds over the launch's wall seconds) in the launches of the largest sizes."""
    if not any("busy_cpu_seconds" in run for run in raw):
        return
    largest = max(r["bytes"] for run in raw for r in run["result"]["results"])
    cores = {}
    for run in raw:
        if "busy_cpu_seconds" in run and any(r["bytes"] == largest for r in run["result"]["results"]):
            cores.setdefault(f"{run['link']}-{run['layout']}", {}).setdefault(run["program"], []).append(
                run["busy_cpu_seconds"] / run["wall_seconds"])
    print(f"\n## cores busy (the machine's busy CPU seconds, niced work aside, / wall seconds) in the launches up to {largest} B, "
          f"median of rounds; this machine has {os.cpu_count()}")
    print(f"{'config':>16} " + " ".join(f"{x:>13}" for x in names))
    for key, by_program in cores.items():
        print(f"{key:>16} " + " ".join(f"{sorted(by_program[x])[len(by_program[x]) // 2]:>13.2f}"
                                       if x in by_program else f"{'-':>13}" for x in names))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    compare.add_sweep_arguments(ap, max_bytes="64M", step_factor=4.0, warmup=3, iters=10, budget="512M",
                                stat="median", timeout=300, out="bench/results-hosts")
    ap.set_defaults(sizes="8,64,512,4K,32K,256K,1M,4M,16M,64M")
    ap.add_argument("--layouts", default="2x1,3x1,4x1,2x2", help="HOSTSxRANKS, comma-separated (2x1,3x1,4x1,2x2)")
    ap.add_argument("--links", default="none,1gbit,10gbit", help="tbf rates, or none (none,1gbit,10gbit)")
    ap.add_argument("--burst", help="tbf bucket (default: netns_hosts.default_burst, 1 ms at the rate)")
    ap.add_argument("--latency", default="50ms", help="tbf queue as a delay (50ms)")
    ap.add_argument("--mtu", type=int, help="the hosts' MTU (1500)")
    ap.add_argument("--cpus", choices=["spread"], help="host i's processes on CPU i modulo the CPUs, as on "
                                                      "machines of their own (default: every rank on every CPU)")
    ap.add_argument("--programs", default=DEFAULT_PROGRAMS,
                    help=f"({DEFAULT_PROGRAMS}); also kolo-gloo, gloo-hd; PROGRAM+NAME=VALUE runs PROGRAM "
                         "with that environment variable too, beside the others")
    args = ap.parse_args()
    args.bind = False
    args.ranks = []
    compare.finish_sweep_arguments(args, "compare_hosts.py")
    if args.from_json:
        raw, saved = compare.load_runs(args.from_json)
        args.op = saved["op"]
        args.rounds = 1 + max(run["round"] for run in raw)
        rows = [row for run in raw for row in rows_with_config(run, args.op)]
        known, seen = DEFAULT_PROGRAMS.split(",") + EXTRA_PROGRAMS, list(dict.fromkeys(run["program"] for run in raw))
        names = [x for x in known if x in seen] + [x for x in seen if x not in known]
        meta = {k: v for k, v in saved.items() if k not in ("runs", "op", "stat", "ranks", "bind")}
    else:
        links, layouts = parse_links(args.links), parse_layouts(args.layouts)
        wanted = [p for p in args.programs.split(",") if p]
        try:
            known = DEFAULT_PROGRAMS.split(",") + EXTRA_PROGRAMS
            unknown = [p for p in wanted if compare.split_variant(p)[0] not in known]
        except ValueError as e:
            sys.exit(f"compare_hosts.py: {e}")
        if unknown:
            sys.exit(f"compare_hosts.py: unknown program(s) {', '.join(unknown)}")
        reason = netns_hosts.unavailable()
        if reason:
            print(f"compare_hosts.py: {reason}", file=sys.stderr)
            sys.exit(77)
        try:
            rows, raw, names = measure(args, links, layouts, wanted)
        except netns_hosts.NetnsError as e:
            sys.exit(f"compare_hosts.py: {e}")
        except KeyboardInterrupt:
            sys.exit("compare_hosts.py: interrupted; the hosts are gone")
        meta = {"links": [link_name(x) for x in links], "layouts": [layout_name(x) for x in layouts],
                "latency": args.latency, "mtu": args.mtu or 1500, "cpus": args.cpus, "sizes": args.sizes}
    if not rows:
        sys.exit("compare_hosts.py: no program produced results")
    table = compare.summarize(rows, args, key=key_of)
    compare.print_tables(table, names, args, title=title)
    print_bound_shares(table, names, args)
    print_cores(raw, names)

    def bound_column(key):
        bound = bound_gbps(*config_of(key))
        return {"link bound": bound} if bound is not None else {}

    compare.write_outputs(rows, raw, table, names, args, prefix="hosts", stem=lambda key: key,
                          meta=meta, extra_columns=bound_column)
    write_bound_shares(table, names, args)
    compare.exit_if_wrong(rows, "compare_hosts.py")


def write_bound_shares(table, names, args):
    """hosts-<op>-bound-share.csv for plot.sh: per shaped configuration, each
    program's busbw at the largest size as a percentage of the link-rate bound."""
    shaped = [key for key in table if bound_gbps(*config_of(key)) is not None]
    if not shaped:
        return
    largest = max(b for key in shaped for b in table[key])
    path = os.path.join(args.out, f"hosts-{args.op}-bound-share.csv")
    with open(path, "w") as f:
        f.write(",".join([f"link and hosts x ranks ({largest >> 20} MiB)"] + names) + "\n")
        for key in shaped:
            cell = table[key].get(largest, {})
            bound = bound_gbps(*config_of(key))
            f.write(",".join([key.replace("-", " ")] + [f"{100 * cell[x][0] / bound:.1f}" if x in cell else ""
                                                         for x in names]) + "\n")


if __name__ == "__main__":
    main()

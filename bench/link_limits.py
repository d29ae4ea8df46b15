#!/usr/bin/python3
"""What TCP itself gets between two network-namespace hosts (bench/netns_hosts.py)
and over loopback, beside which kolo's numbers across hosts are read: 8-byte
latency, and 1 MiB messages over 1..N connections one way and both ways at once
with one thread per end driving all its connections (as a rank moves an
allreduce's data: tcp_loopback --duplex), per link shaping, with the CPU that took; with
--ucx also UCX's own numbers over TCP (ucx_perftest tag_lat 8 B, tag_bw 1 MiB).

  /usr/bin/python3 bench/link_limits.py --build build \\
      --shapes loopback,none,10gbit/256k,10gbit/1m,10gbit/5m,10gbit/10m,1gbit/512k --rounds 3

A shape is `loopback` (this machine's lo, no namespaces), `none` (namespace hosts,
unshaped veth and bridge) or RATE[/BURST] (tbf in both directions; BURST as tc
reads it, default netns_hosts.default_burst); `/MTU` after either sets the hosts'
MTU (1500 otherwise): none//9000, 10gbit/1m/9000. Shapes run interleaved, each round
in a new order. Each measurement is one run of bench/tcp_loopback; beside its
GB/s the table gives the cores it kept busy: the process's own (user + system,
which with tick accounting includes the softirq work done on its behalf) and
the machine's softirq time outside it (ksoftirqd) over the same seconds. Two
cores are all there is: a row whose cores add up to about 2 is bound by the CPU,
not by the link.
"""

import argparse
import contextlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_hosts  # noqa: E402


def parse_shape(word):
    """loopback, none[//MTU] or RATE[/BURST[/MTU]]."""
    if word == "loopback":
        return {"name": word, "rate": None, "burst": None, "mtu": None}
    rate, burst, mtu = (word.split("/") + ["", ""])[:3]
    if rate != "none":
        netns_hosts.parse_rate(rate)
    if burst:
        netns_hosts.parse_size(burst)
    return {"name": word, "rate": None if rate == "none" else rate, "burst": burst or None,
            "mtu": int(mtu) if mtu else None}


def ksoftirqd_ticks():
    """Clock ticks the ksoftirqd threads have run (user + system)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        if name.startswith("ksoftirqd/"):
            fields = text[text.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])
    return total


def timed(argv):
    """Runs argv; returns (stdout, wall s, the child's cores, ksoftirqd's cores)."""
    hz = os.sysconf("SC_CLK_TCK")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    soft = ksoftirqd_ticks()
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"'{' '.join(argv)}' failed: {done.stderr.strip()}")
    own = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / wall
    return done.stdout, wall, own, (ksoftirqd_ticks() - soft) / hz / wall


def last_number(text, before):
    """The number just before `before` on the last line containing it."""
    line = [l for l in text.splitlines() if before in l][-1]
    return float(line.split(before)[0].split()[-1])


def measure_shape(shape, args, tool):
    """One round of one shape: latency, then each stream count one way and both ways."""
    loopback = shape["name"] == "loopback"
    results = []
    with contextlib.nullcontext() if loopback else netns_hosts.Hosts(
            2, rate=shape["rate"], burst=shape["burst"], latency=args.latency, mtu=shape["mtu"]) as hosts:
        where = [] if loopback else ["--netns", f"{hosts.name(0)},{hosts.name(1)}", "--address", hosts.address(1)]
        out, *_ = timed([tool, "--streams", "", "--seconds", str(args.seconds)] + where)
        results.append({"what": "latency_us", "value": last_number(out, " us")})
        for both in (False, True):
            for streams in args.streams:
                argv = [tool, "--no-latency", "--streams", str(streams), "--seconds", str(args.seconds)] + where
                out, wall, own, soft = timed(argv + (["--duplex"] if both else []))
                results.append({"what": "both ways" if both else "one way", "streams": streams,
                                "value": last_number(out, " GB/s"), "own_cores": own, "ksoftirqd_cores": soft})
        if args.ucx:
            results += ucx_perftest(hosts, args)
        shaping = None if loopback else hosts.shaping(0)
    for r in results:
        r["burst"] = shaping["burst"] if shaping else None
    return results


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ucx_perftest(hosts, args):
    """UCX over TCP (ucx_perftest): 8-byte tag latency (median) and 1 MiB tag
    bandwidth one way, server in host 1 (or here, on loopback), client in host 0."""
    results = []
    for test, size, what in (("tag_lat", 8, "ucx_latency_us"), ("tag_bw", 1 << 20, "ucx_one_way")):
        port = str(free_port())
        env = dict(os.environ, UCX_TLS="tcp", UCX_NET_DEVICES=hosts.interface if hosts else "lo")
        server_argv = ["ucx_perftest", "-p", port]
        client_argv = ["ucx_perftest", hosts.address(1) if hosts else "127.0.0.1", "-p", port, "-t", test, "-s",
                       str(size), "-n", "20000" if test == "tag_lat" else "2000"]
        server = subprocess.Popen((hosts.exec_prefix(1) if hosts else []) + server_argv, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(50):  # the server needs a moment to listen
                time.sleep(0.1)
                done = subprocess.run((hosts.exec_prefix(0) if hosts else []) + client_argv, env=env,
                                      capture_output=True, text=True, timeout=120)
                if done.returncode == 0:
                    break
            final = [l for l in done.stdout.splitlines() if l.startswith("Final:")]
            if done.returncode != 0 or not final:
                raise RuntimeError(f"ucx_perftest {test} failed: {(done.stderr + done.stdout).strip()[-400:]}")
            fields = final[-1].split()
            # Final: iterations, latency 50%ile, average, overall (us), MB/s average, overall, msg/s ...
            value = float(fields[2]) if test == "tag_lat" else float(fields[6]) * (1 << 20) / 1e9
            results.append({"what": what, "value": value})
        finally:
            server.kill()
            server.wait()
    return results


def summarize(samples, shapes, args):
    print(f"\n# TCP between two namespace hosts (loopback: this machine's lo); {args.rounds} round(s), "
          f"median [min..max] of rounds; cores: tcp_loopback's own + ksoftirqd's, median")
    print(f"{'shape':>16} {'burst':>9} {'latency us':>11}  " + "  ".join(
        f"{d} x{s}".rjust(22) for d in ("one way", "both ways") for s in args.streams) +
          ("  " + "ucx 8 B, 1 MiB one way".rjust(22) if args.ucx else ""))
    for shape in shapes:
        mine = [r for r in samples if r["shape"] == shape["name"]]
        lat = statistics.median(r["value"] for r in mine if r["what"] == "latency_us")
        burst = next((r.get("burst") for r in mine if r.get("burst")), None)
        cells = []
        for what in ("one way", "both ways"):
            for s in args.streams:
                got = [r for r in mine if r["what"] == what and r["streams"] == s]
                v = [r["value"] for r in got]
                cores = statistics.median(r["own_cores"] + r["ksoftirqd_cores"] for r in got)
                cells.append(f"{statistics.median(v):.2f} [{min(v):.2f}..{max(v):.2f}] {cores:.1f}c".rjust(22))
        ucx = [statistics.median(r["value"] for r in mine if r["what"] == w) if any(r["what"] == w for r in mine)
               else None for w in ("ucx_latency_us", "ucx_one_way")]
        cells += [f"{ucx[0]:.1f} us, {ucx[1]:.2f} GB/s".rjust(22)] if ucx[0] is not None else []
        print(f"{shape['name']:>16} {burst or '-':>9} {lat:>11.1f}  " + "  ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--shapes", default="loopback,none,10gbit/256k,10gbit/1m,10gbit/5m,10gbit/10m,1gbit/512k")
    ap.add_argument("--streams", default="1,2,4")
    ap.add_argument("--seconds", type=float, default=2.0, help="per measurement (2)")
    ap.add_argument("--latency", default="50ms", help="tbf queue as a delay (50ms)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ucx", action="store_true", help="also ucx_perftest over TCP (Debian's ucx-utils)")
    ap.add_argument("--out", help="write every sample to OUT/link-limits.json")
    args = ap.parse_args()
    tool = os.path.join(os.path.abspath(args.build), "bench/tcp_loopback")
    if not os.access(tool, os.X_OK):
        sys.exit(f"link_limits.py: {tool} is not built (cmake --build BUILD --target tcp_loopback)")
    try:
        shapes = [parse_shape(w) for w in args.shapes.split(",") if w]
        args.streams = [int(s) for s in args.streams.split(",")]
    except ValueError as e:
        sys.exit(f"link_limits.py: {e}")
    if any(s["name"] != "loopback" for s in shapes):
        reason = netns_hosts.unavailable()
        if reason:
            print(f"link_limits.py: {reason}", file=sys.stderr)
            sys.exit(77)
    if args.ucx and shutil.which("ucx_perftest") is None:
        sys.exit("link_limits.py: --ucx needs ucx_perftest (apt-get install ucx-utils)")
    samples = []
    try:
        for round_index in range(args.rounds):
            shift = round_index % len(shapes)
            for shape in shapes[shift:] + shapes[:shift]:
                for r in measure_shape(shape, args, tool):
                    samples.append(dict(r, shape=shape["name"], round=round_index))
                print(f"# round {round_index}: {shape['name']} done", file=sys.stderr)
    except (netns_hosts.NetnsError, RuntimeError) as e:
        sys.exit(f"link_limits.py: {e}")
    except KeyboardInterrupt:
        sys.exit("link_limits.py: interrupted; the hosts are gone")
    summarize(samples, shapes, args)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "link-limits.json"), "w") as f:
            json.dump({"shapes": [s["name"] for s in shapes], "seconds": args.seconds, "samples": samples}, f)


if __name__ == "__main__":
    main()

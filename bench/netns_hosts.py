#!/usr/bin/python3
"""Hosts for benchmarks across machines, made of Linux network namespaces.

N namespaces ("hosts"), each with loopback and one interface, nic0, holding
10.232.<s>.<i+1>/24. Every nic0 is one end of a veth pair whose other end is a
port of a bridge inside a further namespace (the switch), so the hosts reach
each other and nothing else: no address or qdisc is ever put on this machine's
own interfaces. Each host's name is its namespace's name and resolves to its
address inside every host ('ip netns exec' bind-mounts /etc/netns/<ns>/hosts
over /etc/hosts), so `kolorun --launcher-command 'ip netns exec {host}'`,
mpirun with an agent that enters the namespace, and MASTER_ADDR=<host name>
all work.

A link may be shaped with tc's token bucket (tbf: this machine's kernel has no
netem) in both directions, as a real NIC is: on the host's nic0 (what the host
sends) and on its bridge port (what the host receives). Byte counters come from
/proc/net/dev inside each host.

As a module (Debian's /usr/bin/python3, standard library only):

    import netns_hosts
    with netns_hosts.Hosts(3, rate="10gbit") as hosts:     # 3 hosts, 10 Gbit/s links
        host_list = ",".join(f"{name}:1" for name in hosts.names)
        hosts.run(0, ["build/tools/kolorun/kolorun", "--launcher-command", "ip netns exec {host}",
                      "-H", host_list, "--network-interface", hosts.interface,
                      "build/tools/kolo-bench/kolo-bench"], check=True)
        print(hosts.counters(1))      # {'rx_bytes': ..., 'tx_bytes': ..., ...}

Leaving the `with` block (also through an exception, Ctrl-C, SIGTERM or SIGHUP)
kills every process left in the namespaces and deletes them and their
/etc/netns folders; making Hosts first removes what runs of processes that no
longer exist left behind.

As a command:

    netns_hosts.py check                        # exit 0, or 77 and why namespaces cannot be made
    netns_hosts.py run --hosts 2 --rate 1gbit [--burst 1m] [--cpus spread] [--host 0] -- CMD ARGS...
    netns_hosts.py cleanup [--all]              # leftovers of dead runs (--all: of live ones too)

`run` makes the hosts, runs CMD in host --host (or, with --host -1, on this
machine) with NETNS_HOSTS, NETNS_ADDRESSES (space-separated), NETNS_INTERFACE
and, with --cpus, NETNS_CPUS in its environment (bench/netns_exec.sh HOST CMD
runs CMD in a host, on its CPUs), prints each host's bytes sent and received over nic0 to
stderr, tears everything down and exits with CMD's status.

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2 (ip, tc).
"""

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

# Namespaces are named PREFIX<creator pid>-<4 hex>-h<i> (hosts) and ...-sw (the
# switch), so that leftovers of a dead creator can be told from a live run's.
PREFIX = "kbh-"
INTERFACE = "nic0"
# 10.231.x.y belongs to the C++ tests (tests/harness/netns.cc); each run's hosts
# are isolated from every other run's anyway, so the third byte only tells runs
# apart in logs.
SUBNET = "10.232"
NETNS_DIR = "/run/netns"
NETNS_ETC_DIR = "/etc/netns"
# 'ip netns exec' needs no more than this to start; a hung tc or ip is a broken
# machine, not a slow one.
COMMAND_TIMEOUT = 20
# tbf's default bucket: this long at the link's rate (see default_burst).
DEFAULT_BURST_SECONDS = 0.001
NETNS_EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns_exec.sh")


class NetnsError(RuntimeError):
    """Setting up or using the namespaces failed; the message says which command."""


def _run(argv, check=True):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise NetnsError(f"'{' '.join(argv)}' did not finish in {COMMAND_TIMEOUT} s") from e
    if check and done.returncode != 0:
        raise NetnsError(f"'{' '.join(argv)}' failed ({done.returncode}): {(done.stderr + done.stdout).strip()}")
    return done


def parse_rate(text):
    """tc's rate words in bits/s: 10gbit, 500mbit, 1000kbit, 12345bit (also '10g')."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:bit)?", str(text).strip().lower())
    if not m:
        raise ValueError(f"not a rate: '{text}' (e.g. 1gbit, 10gbit, 500mbit)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]


def parse_size(text):
    """Bytes from 64k, 5m, 1g (binary units, as tc reads 'kb'/'mb' words) or a number."""
    m = re.fullmatch(r"(\d+)\s*([kmg]?)b?", str(text).strip().lower())
    if not m:
        raise ValueError(f"not a size: '{text}' (e.g. 64k, 5m)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]


def default_burst(rate_bits):
    """tbf's bucket: one millisecond of traffic at the rate, and at least 256 KiB.

    The bucket is what a host may send above the rate after the link was idle,
    which a real NIC cannot: 1 ms of traffic keeps that below 8 % of a 16 MiB
    allreduce. tbf refills it from an hrtimer, so even buckets far below one
    tick of traffic (rate/HZ) reach the rate one way; both ways at once, larger
    buckets cost the two CPUs less (docs/benchmarks.md, "The limits across
    hosts"). Below a GSO packet (64 KiB) tbf would split every packet."""
    return max(256 << 10, int(rate_bits / 8 * DEFAULT_BURST_SECONDS))


def unavailable():
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return f"network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); this runs as uid {os.geteuid()}"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (apt-get install iproute2)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    added = _run(["ip", "netns", "add", probe], check=False)
    if added.returncode != 0:
        return "cannot create a network namespace with 'ip netns add': " + (added.stderr + added.stdout).strip()
    try:
        veth = _run(["ip", "-n", probe, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb"], check=False)
        if veth.returncode != 0:
            return "cannot create veth pairs: " + (veth.stderr + veth.stdout).strip()
        tbf = _run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "va", "root", "tbf", "rate", "1gbit",
                    "burst", "256k", "latency", "10ms"], check=False)
        if tbf.returncode != 0:
            return "this kernel takes no tbf qdisc: " + (tbf.stderr + tbf.stdout).strip()
    finally:
        _run(["ip", "netns", "delete", probe], check=False)
    return None


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes: its namespaces are leftovers.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def namespace_pids(name):
    """Processes inside namespace `name`."""
    done = _run(["ip", "netns", "pids", name], check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def _kill_and_delete(name):
    """SIGKILL to everything in the namespace, then the namespace and its /etc/netns folder go."""
    deadline = time.monotonic() + 5
    pids = namespace_pids(name)
    while pids and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
        pids = [p for p in namespace_pids(name) if _pid_alive(p)]
    _run(["ip", "netns", "delete", name], check=False)
    shutil.rmtree(os.path.join(NETNS_ETC_DIR, name), ignore_errors=True)


def _ours(include_live):
    """Our namespace names (and /etc/netns folders) whose creator is gone, or all of them."""
    names = set()
    for folder in (NETNS_DIR, NETNS_ETC_DIR):
        try:
            entries = os.listdir(folder)
        except FileNotFoundError:
            continue
        for name in entries:
            m = re.match(re.escape(PREFIX) + r"(\d+)-", name)
            if m and (include_live or not _pid_alive(int(m.group(1)))):
                names.add(name)
    return sorted(names)


def remove_leftovers(include_live=False):
    """Deletes the namespaces (and /etc/netns folders) of runs whose process is gone;
    with include_live, every namespace this module ever made. Returns their names."""
    names = _ours(include_live)
    for name in names:
        _kill_and_delete(name)
    return names


class Hosts:
    """N namespace hosts on one bridge; a context manager that always tears down.

    count: number of hosts (1 to 250).
    rate: tc rate of every link in both directions (e.g. "1gbit"), or None: unshaped.
    burst: tbf bucket ("5m", bytes); default default_burst(rate).
    latency: how long a packet may wait in tbf's queue ("50ms"); sets its limit.
    mtu: nic0's MTU (default 1500, the veth default and a real Ethernet's).
    cpus: None (every host on every CPU), "spread" (host i on CPU i modulo the
        CPUs) or one taskset list per host ("0", "2-3"): commands started with
        exec_prefix, run, popen and bench/netns_exec.sh run on their host's CPUs,
        as on separate machines.
    """

    def __init__(self, count, rate=None, burst=None, latency="50ms", mtu=None, cpus=None):
        if not 1 <= int(count) <= 250:
            raise ValueError(f"hosts: need 1 to 250, got {count}")
        reason = unavailable()
        if reason:
            raise NetnsError(reason)
        remove_leftovers()
        self.count = int(count)
        self.interface = INTERFACE
        tag = f"{os.getpid()}-{random.randrange(1 << 16):04x}"
        self._prefix = PREFIX + tag
        self.switch = self._prefix + "-sw"
        self.names = [f"{self._prefix}-h{i}" for i in range(self.count)]
        third = random.randrange(256)
        self.addresses = [f"{SUBNET}.{third}.{i + 1}" for i in range(self.count)]
        if cpus == "spread":
            cpus = [str(i % (os.cpu_count() or 1)) for i in range(self.count)]
        if cpus is not None and (len(cpus) != self.count or not all(re.fullmatch(r"[0-9,-]+", c) for c in cpus)):
            raise ValueError(f"cpus: 'spread' or one taskset CPU list per host, got {cpus}")
        self.cpus = cpus
        self._created = []
        self._shaping = [None] * self.count
        self._old_handlers = {}
        try:
            self._build(mtu)
            if rate is not None:
                for i in range(self.count):
                    self.shape(i, rate, burst, latency)
        except BaseException:
            self.close()
            raise

    # -- setup and teardown -------------------------------------------------

    def _build(self, mtu):
        _run(["ip", "netns", "add", self.switch])
        self._created.append(self.switch)
        _run(["ip", "-n", self.switch, "link", "add", "name", "br0", "type", "bridge"])
        _run(["ip", "-n", self.switch, "link", "set", "br0", "up"])
        for i, (name, address) in enumerate(zip(self.names, self.addresses)):
            port = f"p{i}"
            _run(["ip", "netns", "add", name])
            self._created.append(name)
            _run(["ip", "-n", name, "link", "set", "lo", "up"])
            _run(["ip", "-n", name, "link", "add", "name", INTERFACE, "type", "veth", "peer", "name", port,
                  "netns", self.switch])
            if mtu:
                _run(["ip", "-n", name, "link", "set", INTERFACE, "mtu", str(mtu)])
                _run(["ip", "-n", self.switch, "link", "set", port, "mtu", str(mtu)])
            _run(["ip", "-n", self.switch, "link", "set", port, "master", "br0"])
            _run(["ip", "-n", self.switch, "link", "set", port, "up"])
            _run(["ip", "-n", name, "addr", "add", address + "/24", "dev", INTERFACE])
            _run(["ip", "-n", name, "link", "set", INTERFACE, "up"])
        table = "127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, a in zip(self.names, self.addresses))
        for name in self.names:
            os.makedirs(os.path.join(NETNS_ETC_DIR, name), exist_ok=True)
            with open(os.path.join(NETNS_ETC_DIR, name, "hosts"), "w") as f:
                f.write(table)

    def close(self):
        """Kills what runs in the namespaces and deletes them; safe to call twice."""
        for name in reversed(self._created):
            _kill_and_delete(name)
        self._created = []

    def __enter__(self):
        # SIGTERM and SIGHUP end the block as Ctrl-C does, so that __exit__ runs.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, _raise_interrupt)
            except ValueError:  # not the main thread: the caller handles signals
                pass
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        finally:
            for sig, handler in self._old_handlers.items():
                signal.signal(sig, handler)
            self._old_handlers = {}
        return False

    # -- links ----------------------------------------------------------------

    def shape(self, i, rate, burst=None, latency="50ms"):
        """Shapes host i's link to `rate` in both directions with tbf (replacing any
        shaping); burst defaults to default_burst(rate)."""
        bits = parse_rate(rate)
        bucket = parse_size(burst) if burst is not None else default_burst(bits)
        words = ["tbf", "rate", str(rate), "burst", str(bucket), "latency", str(latency)]
        for ns, dev in ((self.names[i], INTERFACE), (self.switch, f"p{i}")):
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", *words])
        self._shaping[i] = {"rate": str(rate), "rate_bits": bits, "burst": bucket, "latency": str(latency)}

    def unshape(self, i):
        """Removes host i's shaping (both directions)."""
        for ns, dev in ((self.names[i], INTERFACE), (self.switch, f"p{i}")):
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"], check=False)
        self._shaping[i] = None

    def shaping(self, i):
        """{'rate', 'rate_bits', 'burst', 'latency'} of host i's link, or None."""
        return self._shaping[i]

    def qdiscs(self, i):
        """tc's own statistics of host i's two qdiscs (sent, dropped, overlimits)."""
        return {side: _run(["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev", dev]).stdout
                for side, ns, dev in (("egress", self.names[i], INTERFACE), ("ingress", self.switch, f"p{i}"))}

    def set_link(self, i, up):
        """Takes host i's nic0 down or up."""
        _run(["ip", "-n", self.names[i], "link", "set", INTERFACE, "up" if up else "down"])

    # -- names and commands ----------------------------------------------------

    def name(self, i):
        return self.names[i]

    def address(self, i):
        return self.addresses[i]

    def exec_prefix(self, i):
        """argv prefix that runs a command inside host i (on its CPUs, if it has some)."""
        pin = ["taskset", "-c", self.cpus[i]] if self.cpus else []
        return ["ip", "netns", "exec", self.names[i]] + pin

    def kolorun_argv(self, kolorun, slots=1):
        """argv that starts `kolorun` in host 0 with `slots` ranks on every host,
        each started through bench/netns_exec.sh (run it with environment()):
        kolorun's other flags and the program follow."""
        host_list = ",".join(f"{name}:{slots}" for name in self.names)
        return [NETNS_EXEC, self.names[0], kolorun, "--launcher-command", f"{NETNS_EXEC} {{host}}", "-H", host_list,
                "--network-interface", self.interface]

    def run(self, i, argv, **kwargs):
        """subprocess.run(argv) inside host i."""
        return subprocess.run(self.exec_prefix(i) + list(argv), **kwargs)

    def popen(self, i, argv, **kwargs):
        """subprocess.Popen(argv) inside host i (killed at teardown if still running)."""
        return subprocess.Popen(self.exec_prefix(i) + list(argv), **kwargs)

    def pids(self, i):
        """Processes running inside host i."""
        return [p for p in namespace_pids(self.names[i]) if _pid_alive(p)]

    def kill_all(self):
        """SIGKILL to every process left inside the hosts (after a run that timed
        out, say); returns how many there were."""
        left = [p for i in range(self.count) for p in self.pids(i)]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(left)

    def environment(self):
        """NETNS_HOSTS, NETNS_ADDRESSES, NETNS_INTERFACE (and NETNS_CPUS) for a command
        that uses the hosts, and for bench/netns_exec.sh."""
        env = {"NETNS_HOSTS": " ".join(self.names), "NETNS_ADDRESSES": " ".join(self.addresses),
               "NETNS_INTERFACE": INTERFACE}
        if self.cpus:
            env["NETNS_CPUS"] = " ".join(self.cpus)
        return env

    # -- counters ----------------------------------------------------------------

    def counters(self, i, interface=INTERFACE):
        """nic0's counters inside host i, from the namespace's /proc/net/dev:
        rx_bytes, rx_packets, rx_drop, tx_bytes, tx_packets, tx_drop."""
        text = _run(self.exec_prefix(i) + ["cat", "/proc/net/dev"]).stdout
        return parse_proc_net_dev(text)[interface]

    def all_counters(self):
        return [self.counters(i) for i in range(self.count)]


def parse_proc_net_dev(text):
    """/proc/net/dev -> {interface: {rx_bytes, rx_packets, rx_drop, tx_bytes, tx_packets, tx_drop}}."""
    table = {}
    for line in text.splitlines()[2:]:
        if ":" not in line:
            continue
        name, fields = line.split(":", 1)
        v = [int(x) for x in fields.split()]
        table[name.strip()] = {"rx_bytes": v[0], "rx_packets": v[1], "rx_drop": v[3],
                               "tx_bytes": v[8], "tx_packets": v[9], "tx_drop": v[11]}
    return table


def counter_delta(before, after):
    return [{k: a[k] - b[k] for k in a} for b, a in zip(before, after)]


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _cmd_run(args):
    if not args.command:
        sys.exit("netns_hosts.py run: give the command after --")
    if not -1 <= args.host < args.hosts:
        sys.exit(f"netns_hosts.py run: --host must be -1 (this machine) or 0..{args.hosts - 1}")
    cpus = args.cpus if args.cpus in (None, "spread") else args.cpus.split(";")
    with Hosts(args.hosts, rate=args.rate, burst=args.burst, latency=args.latency, mtu=args.mtu, cpus=cpus) as hosts:
        for i in range(hosts.count):
            s = hosts.shaping(i)
            link = f"tbf {s['rate']} burst {s['burst']} latency {s['latency']}" if s else "unshaped"
            on = f", CPUs {hosts.cpus[i]}" if hosts.cpus else ""
            print(f"# host {i}: {hosts.name(i)} {hosts.address(i)} ({link}{on})", file=sys.stderr)
        before = hosts.all_counters()
        env = dict(os.environ, **hosts.environment())
        argv = args.command if args.host < 0 else hosts.exec_prefix(args.host) + args.command
        try:
            status = subprocess.run(argv, env=env).returncode
        except FileNotFoundError as e:
            sys.exit(f"netns_hosts.py run: {e}")
        for i, d in enumerate(counter_delta(before, hosts.all_counters())):
            print(f"# host {i}: sent {d['tx_bytes']} B, received {d['rx_bytes']} B over {INTERFACE}", file=sys.stderr)
    return status if status >= 0 else 128 - status


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="verb", required=True)
    sub.add_parser("check", help="exit 0 if namespaces can be made here, else 77 with the reason")
    run = sub.add_parser("run", help="make hosts, run a command, tear down")
    run.add_argument("--hosts", type=int, default=2)
    run.add_argument("--rate", help="tbf rate of every link, both directions (e.g. 1gbit); default unshaped")
    run.add_argument("--burst", help="tbf bucket (e.g. 5m); default 1 ms at the rate, at least 256k")
    run.add_argument("--latency", default="50ms", help="tbf queue length as a delay (50ms)")
    run.add_argument("--mtu", type=int, help="nic0's MTU (1500)")
    run.add_argument("--cpus", help="'spread' (host i on CPU i) or taskset lists per host, 'A;B;...' (default: all)")
    run.add_argument("--host", type=int, default=0, help="host to run the command in; -1: this machine (0)")
    run.add_argument("command", nargs=argparse.REMAINDER)
    clean = sub.add_parser("cleanup", help="remove namespaces of dead runs")
    clean.add_argument("--all", action="store_true", help="also those of runs still alive")
    args = ap.parse_args()
    if args.verb == "check":
        reason = unavailable()
        if reason:
            print(f"netns_hosts.py: {reason}", file=sys.stderr)
            return 77
        return 0
    if args.verb == "cleanup":
        for name in remove_leftovers(include_live=args.all):
            print(f"removed {name}", file=sys.stderr)
        return 0
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    try:
        return _cmd_run(args)
    except (NetnsError, ValueError) as e:
        sys.exit(f"netns_hosts.py: {e}")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

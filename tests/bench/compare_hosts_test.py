#!/usr/bin/python3
"""The benchmark tooling across network-namespace hosts, in CI:

- bench/compare_hosts.py in its smallest configuration (2 hosts x 1 rank over a
  1 Gbit/s tbf link, kolo's tcp communicator alone, two sizes, --check) exits 0
  and writes well-formed tables, JSON and CSVs, with the traffic counted on the
  hosts' interfaces and nothing left behind;
- bench/netns_hosts.py tears its hosts down when the command fails and when it is
  stopped with SIGTERM, and removes what a SIGKILLed run left.

  tests/bench/compare_hosts_test.py REPO_ROOT BUILD_DIR

Exits 77 (ctest's SKIP_RETURN_CODE) where namespaces cannot be made (not root, no
veth or tbf in the kernel).
"""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

repo, build = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(repo, "bench"))
import netns_hosts  # noqa: E402

PYTHON = "/usr/bin/python3"
NETNS_HOSTS = os.path.join(repo, "bench/netns_hosts.py")
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAILED: {what}", file=sys.stderr)


def ours_of(pid):
    """Namespaces and /etc/netns folders made by process `pid`."""
    found = []
    for folder in (netns_hosts.NETNS_DIR, netns_hosts.NETNS_ETC_DIR):
        if os.path.isdir(folder):
            found += [n for n in os.listdir(folder) if n.startswith(f"{netns_hosts.PREFIX}{pid}-")]
    return found


def wait_for(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_compare_hosts():
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.Popen([os.path.join(repo, "bench/compare_hosts.py"), "--build", build, "--layouts", "2x1",
                                "--links", "1gbit", "--programs", "kolo-tcp", "--sizes", "8,1M", "--warmup", "1",
                                "--iters", "3", "--check", "--timeout", "120", "--out", out],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = run.communicate(timeout=300)
        if run.returncode == 77:
            print(f"skipped: {stderr.strip()}")
            sys.exit(77)
        check(run.returncode == 0, f"compare_hosts.py exits 0, not {run.returncode}: {stderr[-2000:]}")
        check(not ours_of(run.pid), f"compare_hosts.py left namespaces: {ours_of(run.pid)}")
        # The busbw table: a header naming the configuration, then one row per size.
        check("## allreduce, 2 hosts x 1 rank(s), link 1gbit: busbw (GB/s)" in stdout, f"table header in:\n{stdout}")
        rows = {int(m.group(1)): float(m.group(2))
                for m in re.finditer(r"^\s+(\d+)\s+([0-9.]+)\s+[0-9.]+\s+\S+\s*$", stdout, re.M)}
        check(set(rows) == {8, 1 << 20}, f"rows for 8 and 1048576 bytes in:\n{stdout}")
        # Not above the link (with a 256 KiB bucket a 1 MiB allreduce can pass a little
        # faster than the rate, never several times), and not nothing.
        check(0 < rows.get(1 << 20, 0) < 0.125 * 2, f"1 MiB busbw between 0 and twice 0.125 GB/s: {rows}")
        check("share of the link-rate bound (0.125 GB/s busbw)" in stdout, "the share-of-bound table")
        with open(os.path.join(out, "hosts-allreduce.json")) as f:
            saved = json.load(f)
        runs = saved["runs"]
        check(len(runs) == 1 and runs[0]["program"] == "kolo-tcp" and runs[0]["layout"] == "2x1"
              and runs[0]["link"] == "1gbit", f"one kolo-tcp run on 2x1 over 1gbit: {runs}")
        results = runs[0]["result"]["results"] if runs else []
        check([r["wrong"] for r in results] == [0, 0], f"--check found nothing wrong: {results}")
        # 4 calls of 1 MiB each way and more: the traffic went through nic0.
        sent = runs[0]["host_bytes_sent"] if runs else [0, 0]
        check(len(sent) == 2 and min(sent) >= 4 << 20, f"each host sent at least 4 MiB over nic0: {sent}")
        with open(os.path.join(out, "hosts-allreduce-1gbit-2x1.csv")) as f:
            table = list(csv.reader(f))
        check(table[0] == ["bytes", "kolo-tcp", "link bound"], f"CSV header: {table[0]}")
        check([r[0] for r in table[1:]] == ["8", "1048576"] and all(float(r[2]) == 0.125 for r in table[1:]),
              f"CSV rows: {table[1:]}")
        check(os.path.exists(os.path.join(out, "hosts-allreduce-1gbit-2x1-time.csv")), "the time CSV")


def test_teardown():
    # A failing command: its status comes back, nothing stays.
    run = subprocess.run([PYTHON, NETNS_HOSTS, "run", "--hosts", "2", "--rate", "1gbit", "--", "sh", "-c",
                          "grep -q \"$(echo $NETNS_HOSTS | cut -d' ' -f2)\" /etc/hosts && exit 3"],
                         capture_output=True, text=True, timeout=60)
    check(run.returncode == 3, f"netns_hosts.py run returns the command's status 3: {run.returncode} {run.stderr}")
    # SIGTERM while the command runs: the command dies with the hosts.
    run = subprocess.Popen([PYTHON, NETNS_HOSTS, "run", "--hosts", "2", "--", "sleep", "600"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    check(wait_for(lambda: len(ours_of(run.pid)) >= 3), "hosts made")
    hosts = [n for n in ours_of(run.pid) if n.endswith("-h0")]
    check(wait_for(lambda: hosts and netns_hosts.namespace_pids(hosts[0])), "sleep started in host 0")
    sleeper = netns_hosts.namespace_pids(hosts[0]) if hosts else []
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=60)
    check(not ours_of(run.pid), f"SIGTERM: namespaces left: {ours_of(run.pid)}")
    check(all(not os.path.exists(f"/proc/{p}") for p in sleeper), f"SIGTERM: the command survived: {sleeper}")
    # SIGKILL: the leftovers go with the next cleanup.
    run = subprocess.Popen([PYTHON, NETNS_HOSTS, "run", "--hosts", "2", "--", "sleep", "600"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    check(wait_for(lambda: len(ours_of(run.pid)) >= 3), "hosts made")
    run.kill()
    run.wait()
    check(ours_of(run.pid), "SIGKILL leaves the namespaces")
    subprocess.run([PYTHON, NETNS_HOSTS, "cleanup"], check=True, timeout=60)
    check(not ours_of(run.pid), f"cleanup removes a dead run's namespaces: {ours_of(run.pid)}")


def main():
    reason = netns_hosts.unavailable()
    if reason:
        print(f"skipped: {reason}")
        return 77
    test_compare_hosts()
    test_teardown()
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("compare_hosts_test: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

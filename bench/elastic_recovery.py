#!/usr/bin/python3
"""Recovery time after a lost worker: kolo's elastic reset against torchrun's
restart of the whole worker group, on one host, trial by trial interleaved.

Each trial is a fresh job of 4 workers training the same model (a stack of
nn.Linear layers, 25.2 M float32 parameters by default, SGD with momentum) on a
fixed batch, with its state kept every step:

  kolo-kill-rank0, kolo-kill-rank2
      kolorun -np 4 --min-np 3, kolo.torch.elastic.run, TorchState committed
      (in memory) after every step; SIGKILL of the worker that is rank 0 (or
      rank 2); the 3 survivors re-form and go on.
  torchrun-kill-rank2
      Debian's torchrun (torch 1.13) --nnodes 1 --nproc_per_node 4
      --max_restarts 3, PyTorch DDP over Gloo, rank 0 saving model and
      optimizer with torch.save after every step; SIGKILL of local rank 2;
      torchrun stops the others and starts 4 new workers, which load the
      checkpoint.

Further cases, for the other targets of elastic mode, run when --cases names them:

  kolo-stop-rank2
      as kolo-kill-rank2 with SIGSTOP instead of SIGKILL, under
      KOLO_PEER_TIMEOUT=3: the survivors name the stalled worker, kolorun kills
      it and they re-form (target: within the peer timeout plus 1 s).
  kolo-add-worker
      kolorun -np 3 --min-np 3 --max-np 4 with a discovery script that reads a
      hosts file; the driver rewrites it from localhost:3 to localhost:4 at a
      random phase of a step. Measured: the survivors' pause (their last update
      before the change to their first step after it, less a steady step), whether
      they rolled back, and the joiner's first step after its init() returned
      and after it called run() (model, optimizer and TorchState built). The
      pause's target is the state's bytes over the link plus 0.5 s; the link's
      time for the state is measured at the end of the trial: every worker
      broadcasts the state's tensors from rank 0 (median of 3, the slowest worker).
      The job trains until --steps-after steps ran at 4 workers.
  kolo-steady-elastic, kolo-steady-plain
      no event: the same job with --min-np 3, and without (not elastic); their
      steady steps side by side give what elastic mode costs.
  kolo-kill-host
      the 4 workers on 2 network-namespace hosts (bench/netns_hosts.py, 2
      workers each, a 10 Gbit/s link, each host on a CPU of its own), kolorun
      -H across them with --min-np 2; both workers of host 1 (ranks 2 and 3)
      are SIGKILLed at once and host 0's two go on. Needs root.
  kolo-commit
      the elastic job, each worker also copying the state's tensors into
      tensors of its own after every commit: commit() against that copy, both
      taken step by step in the same conditions.
Without kolo-commit, the kolo cases give commit()'s time against one copy
after step 1, back to back.

Every worker appends a line to a file at each completed step, with its time on
CLOCK_MONOTONIC (bench/elastic_recovery_worker.py). Once every worker has
completed --kill-after steps, the driver waits for the next step of the victim,
sleeps a random fraction of a steady step (the same fraction for every case of
one trial), records the time and sends SIGKILL. For each worker of the
recovered job (kolo: the 3 survivors; torchrun: the 4 restarted workers) the
recovery is

    (its first step completed after the job recovered) - (kill time) - (steady step)

where the steady step is the median time between consecutive steps of the job
before the kill (the first two steps left out), and the trial's recovery time
is that of its slowest worker. "After the job recovered" means a step of the
new generation (kolo: run()'s reset count above 0; torchrun: a restarted
worker), not a step of the old job that was already past its collectives when
the kill came. The script prints a table (p50, max, min over the trials per
case), a breakdown of where the time went, and with --out writes every trial
(trials.csv), the table (summary.txt) and, where gnuplot is installed, a plot.

    /usr/bin/python3 bench/elastic_recovery.py --trials 20 --out docs/benchmark-data/elastic-recovery \\
        --plot docs/plots/elastic-recovery/recovery.png
    /usr/bin/python3 bench/elastic_recovery.py --quick        # 2 trials, a small model: a smoke test

Every process a trial starts (the launcher in a session of its own, and each
worker by the pid it wrote) and every temporary file is removed when the trial
ends, when the script fails, and on Ctrl-C or SIGTERM."""

import argparse
import csv
import math
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKER = os.path.join(HERE, 'elastic_recovery_worker.py')
PYTHON = '/usr/bin/python3'  # Debian's, with python3-torch
CASES = ['kolo-kill-rank0', 'kolo-kill-rank2', 'torchrun-kill-rank2']
# Further cases, run when --cases names them (see the module's text).
MORE_CASES = ['kolo-stop-rank2', 'kolo-add-worker', 'kolo-steady-elastic', 'kolo-steady-plain', 'kolo-commit',
              'kolo-kill-host']
NP = 4
STOP_PEER_TIMEOUT = 3  # KOLO_PEER_TIMEOUT of kolo-stop-rank2: the target is this plus 1 s


class TrialError(RuntimeError):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def read_records(directory):
    """pid -> list of (kind, fields...) from the workers' step files."""
    records = {}
    for name in os.listdir(directory):
        if not (name.startswith('steps-') and name.endswith('.txt')):
            continue
        pid = int(name[len('steps-'):-len('.txt')])
        with open(os.path.join(directory, name)) as f:
            lines = f.read().split('\n')
        rows = []
        for line in lines[:-1]:  # the last piece is '' or a line still being written
            parts = line.split()
            if not parts:
                continue
            kind, values = parts[0], parts[1:]
            if kind in ('step', 'trained'):
                t, step, rank, size, gen = values
                rows.append((kind, float(t), int(step), int(rank), int(size), int(gen)))
            elif kind == 'start':
                rows.append(('start', float(values[0])))
            elif kind in ('memcpy', 'broadcast'):
                rows.append((kind, float(values[0]), float(values[1])))
            else:
                t, rank, size, gen = values
                rows.append((kind, float(t), int(rank), int(size), int(gen)))
        records[pid] = rows
    return records


def steps_of(rows):
    return [r for r in rows if r[0] == 'step']


def is_our_worker(pid, directory):
    """True when pid still runs our worker for this trial (not a reused pid)."""
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            cmdline = f.read().split(b'\0')
    except OSError:
        return False
    return WORKER.encode() in cmdline and directory.encode() in cmdline


class Trial:
    """One job: started, watched, its victim killed, and everything it made removed."""

    def __init__(self, case, args, phase, base_tmp):
        self.case, self.args, self.phase = case, args, phase
        self.dir = tempfile.mkdtemp(prefix=f'elastic-recovery-{case}-', dir=base_tmp)
        self.proc = None
        self.output_path = os.path.join(self.dir, 'launcher.log')
        self.hosts = None  # kolo-kill-host: the namespace hosts, made in run()

    def total_steps(self):
        return self.args.kill_after + 1 + self.args.steps_after

    def command(self):
        a = self.args
        worker_args = ['--dir', self.dir, '--layers', str(a.layers), '--width', str(a.width), '--batch',
                       str(a.batch), '--steps', str(self.total_steps()), '--threads', str(a.threads)]
        if self.case == 'kolo-add-worker':
            worker_args += ['--full-size', str(NP), '--steps-at-full-size', str(a.steps_after), '--time-broadcast']
        if self.case == 'kolo-commit':
            worker_args += ['--copy-every-step']
        kolo_worker = [PYTHON, WORKER, 'kolo', *worker_args]
        timeout = ['--timeout', str(int(a.trial_timeout))]
        if self.case == 'kolo-steady-plain':
            return [a.kolorun, '-np', str(NP), *timeout, *kolo_worker]
        if self.case == 'kolo-add-worker':
            # NP - 1 slots, then NP once the driver rewrites the hosts file.
            self.hosts_file = os.path.join(self.dir, 'hosts')
            with open(self.hosts_file, 'w') as f:
                f.write(f'localhost:{NP - 1}\n')
            script = os.path.join(self.dir, 'discover.sh')
            with open(script, 'w') as f:
                f.write(f'#!/bin/sh\nexec cat {self.hosts_file}\n')
            os.chmod(script, 0o755)
            return [a.kolorun, '-np', str(NP - 1), '--min-np', str(NP - 1), '--max-np', str(NP),
                    '--host-discovery-script', script, *timeout, *kolo_worker]
        if self.case == 'kolo-kill-host':
            return self.hosts.kolorun_argv(a.kolorun, slots=NP // 2) + ['--min-np', str(NP // 2), *timeout,
                                                                         *kolo_worker]
        if self.case.startswith('kolo'):
            return [a.kolorun, '-np', str(NP), '--min-np', str(NP - 1), *timeout, *kolo_worker]
        return [a.torchrun, '--nnodes', '1', '--nproc_per_node', str(NP), '--max_restarts', '3',
                '--redirects', '1', '--tee', '1', '--log_dir', os.path.join(self.dir, 'torchrun-logs'),
                '--master_addr', '127.0.0.1', '--master_port', str(free_port()),
                WORKER, 'torchrun', *worker_args]

    def env(self):
        env = dict(os.environ)
        env.update(OPENBLAS_NUM_THREADS=str(self.args.threads), OMP_NUM_THREADS=str(self.args.threads))
        if self.case.startswith('kolo'):
            python_path = os.path.join(self.args.build_dir, 'python')
            env['PYTHONPATH'] = python_path + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
            env['KOLO_FLIGHT_RECORDER_DIR'] = os.path.join(self.dir, 'flight')
        if self.case == 'kolo-stop-rank2':
            env['KOLO_PEER_TIMEOUT'] = str(STOP_PEER_TIMEOUT)
        if self.hosts is not None:
            env.update(self.hosts.environment())
        return env

    def run(self):
        a = self.args
        if self.case == 'kolo-kill-host':
            sys.path.insert(0, HERE)
            import netns_hosts
            self.hosts = netns_hosts.Hosts(2, rate='10gbit', cpus='spread')
        with open(self.output_path, 'w') as out:
            self.proc = subprocess.Popen(self.command(), env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)
        deadline = time.monotonic() + a.trial_timeout
        t_launch = time.monotonic()
        workers = NP - 1 if self.case == 'kolo-add-worker' else NP

        # 1. Every worker has completed kill_after steps.
        while True:
            records = self.poll(deadline, 'before the event')
            done = {pid: steps_of(rows) for pid, rows in records.items()}
            if len(done) == workers and all(len(s) >= a.kill_after for s in done.values()):
                break
            time.sleep(0.01)
        intervals = []
        for steps in done.values():
            times = [s[1] for s in steps[2:]]
            intervals += [b - t for t, b in zip(times, times[1:])]
        steady = statistics.median(intervals)
        common = dict(case=self.case, phase=self.phase, steady_step=steady,
                      **commit_and_memcpy(records, steps_from=3))
        if self.case.startswith('kolo-steady') or self.case == 'kolo-commit':
            return self.finish_steady(deadline, t_launch, common)

        # 2. The event at a random phase of a step: a kill or stop of the victim (by
        # its current rank, or its local rank under torchrun), or a worker added.
        target_rank = 0 if self.case.endswith('rank0') else 2
        victim = next(pid for pid, steps in done.items() if steps[-1][3] == target_rank)
        # kolo-kill-host: every worker of host 1 (the upper half of the ranks).
        victims = ([pid for pid, steps in done.items() if steps[-1][3] >= NP // 2]
                   if self.case == 'kolo-kill-host' else [victim])
        last = len(done[victim])
        while len(steps_of(self.poll(deadline, 'before the event').get(victim, []))) == last:
            time.sleep(0.002)
        t_ref = steps_of(read_records(self.dir)[victim])[last][1]
        if last + 1 >= self.total_steps():
            raise TrialError('the job reached its last step before the event (steps too short for --steps-after)')
        delay = t_ref + self.phase * steady - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t_kill = time.monotonic()
        if self.case == 'kolo-add-worker':
            partial = self.hosts_file + '.partial'
            with open(partial, 'w') as f:
                f.write(f'localhost:{NP}\n')
            os.replace(partial, self.hosts_file)
        else:
            for pid in victims:
                os.kill(pid, signal.SIGSTOP if self.case == 'kolo-stop-rank2' else signal.SIGKILL)
        t_kill_after = time.monotonic()
        load = os.getloadavg()[0]
        if self.case == 'kolo-add-worker':
            return self.finish_add(deadline, t_launch, t_kill, set(done), common, load)

        # 3. Every worker of the recovered job has completed a step of the new generation.
        before = set(done)
        expected = NP - len(victims) if self.case.startswith('kolo') else NP

        def recovered_firsts(records):
            if self.case.startswith('kolo'):
                recovered = {pid: rows for pid, rows in records.items() if pid in before and pid not in victims}
            else:
                recovered = {pid: rows for pid, rows in records.items() if pid not in before}
            firsts = {pid: [s for s in steps_of(rows) if s[5] > 0] for pid, rows in recovered.items()}
            return firsts if len(firsts) == expected and all(firsts.values()) else None
        firsts = self.wait_until(deadline, 'before every worker of the recovered job completed a step',
                                 recovered_firsts)

        # 4. The job ends by itself (it trains --steps-after more steps).
        rc, records = self.wait_for_end(deadline)

        # The recovered job's steady step: between its later steps (its first two left out).
        after_steps = []
        for pid in firsts:
            times = [s[1] for s in steps_of(records[pid]) if s[5] > 0][1:]
            after_steps += [b - t for t, b in zip(times, times[1:])]
        steady_after = statistics.median(after_steps) if after_steps else math.nan
        # The step subtracted: the shorter of the job's steps before and after, so that
        # neither the 3 survivors' faster step nor a slower one makes the recovery look shorter.
        subtracted = steady if math.isnan(steady_after) else min(steady, steady_after)

        per_worker = []
        for pid in sorted(firsts):
            rows = records[pid]
            new_steps = [s for s in steps_of(rows) if s[5] > 0]
            first = new_steps[0][1]

            def first_event(kind, rows=rows):
                found = [r[1] for r in rows if r[0] == kind and r[1] >= t_kill]
                return found[0] - t_kill if found else math.nan

            if self.case.startswith('kolo'):
                stages = {'detect': first_event('restore'), 'restored': first_event('restored'),
                          'reset': first_event('reset'), 'synced': first_event('entered')}
            else:
                stages = {'detect': next((r[1] for r in rows if r[0] == 'start'), math.nan) - t_kill,
                          'restored': math.nan, 'reset': math.nan, 'synced': first_event('ready')}
            per_worker.append(dict(pid=pid, first_step=first - t_kill, recovery=first - t_kill - subtracted,
                                   rank=new_steps[0][3], size=new_steps[0][4], **stages))
        slowest = max(per_worker, key=lambda w: w['recovery'])
        return dict(common, steady_step_after=steady_after,
                    subtracted=subtracted, recovery=slowest['recovery'],
                    recovery_less_step_before=slowest['first_step'] - steady,
                    fastest_worker=min(w['recovery'] for w in per_worker),
                    first_step=slowest['first_step'], detect=max(w['detect'] for w in per_worker),
                    restored=max(w['restored'] for w in per_worker), reset=max(w['reset'] for w in per_worker),
                    synced=max(w['synced'] for w in per_worker),
                    size_after=slowest['size'], workers_after=len(per_worker), kill_syscall=t_kill_after - t_kill,
                    startup=t_kill - t_launch, wall=time.monotonic() - t_launch, launcher_rc=rc, load=load)

    def wait_until(self, deadline, what, done):
        """Polls the workers' records until done(records) gives a value, and returns it;
        fails when the launcher exits first ("the launcher exited with RC <what>")."""
        while True:
            exited = self.proc.poll() is not None  # before reading: an exit after it is read again
            value = done(self.poll(deadline, what, allow_exit=True))
            if value:
                return value
            if exited:
                raise TrialError(f'the launcher exited with {self.proc.returncode} {what}')
            time.sleep(0.01)

    def wait_for_end(self, deadline):
        try:
            rc = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise TrialError(f'the job did not end within --trial-timeout {self.args.trial_timeout:.0f} s') from None
        if rc != 0:
            raise TrialError(f'the launcher exited with {rc}')
        return rc, read_records(self.dir)

    def finish_steady(self, deadline, t_launch, common):
        """No event: the job's steps from the third to the last, elastic mode or not."""
        rc, records = self.wait_for_end(deadline)
        intervals = []
        for rows in records.values():
            times = [s[1] for s in steps_of(rows)[2:]]
            intervals += [b - t for t, b in zip(times, times[1:])]
        return dict(common, steady_step=statistics.median(intervals), **commit_and_memcpy(records, steps_from=3),
                    wall=time.monotonic() - t_launch, launcher_rc=rc, load=os.getloadavg()[0])

    def finish_add(self, deadline, t_launch, t_add, before, common, load):
        """A worker joins: the survivors' pause, the joiner's first step after its init()."""

        def stepped_together(records):
            joiners = [pid for pid in records if pid not in before and steps_of(records[pid])]
            survivors_on = all(any(s[5] > 0 for s in steps_of(records[pid])) for pid in before)
            return joiners if joiners and survivors_on else None
        joiners = self.wait_until(deadline, 'before the new worker and the others completed a step together',
                                  stepped_together)
        rc, records = self.wait_for_end(deadline)
        joiner = records[joiners[0]]
        init = next(r[1] for r in joiner if r[0] == 'init')
        ready = next(r[1] for r in joiner if r[0] == 'ready')
        joiner_first = steps_of(joiner)[0]
        # A survivor's last update of the old membership (the commit it ends with
        # raises HostsUpdatedInterrupt) to its first step of the new one, less
        # that step: commit, reset and sync. Rolled back: that first step is not
        # the next one.
        pauses, rolled_back = [], False
        for pid in before:
            last_trained = [r for r in records[pid] if r[0] == 'trained' and r[5] == 0][-1]
            new = [s for s in steps_of(records[pid]) if s[5] > 0]
            pauses.append(new[0][1] - last_trained[1] - common['steady_step'])
            rolled_back |= new[0][2] != last_trained[2] + 1
        state_bytes = 2 * 4 * self.args.layers * (self.args.width * self.args.width + self.args.width)
        # The link's time for the state: its broadcast from rank 0 at the end, every tensor once.
        broadcast = max((r[2] for rows in records.values() for r in rows if r[0] == 'broadcast'), default=math.nan)
        return dict(common, pause=max(pauses), state_broadcast=broadcast,
                    pause_over_budget=max(pauses) - (broadcast + 0.5), joiner_init_to_step=joiner_first[1] - init,
                    joiner_ready_to_step=joiner_first[1] - ready,
                    add_to_joiner_step=joiner_first[1] - t_add, rolled_back=int(rolled_back),
                    state_mib=state_bytes / 2**20, size_after=joiner_first[4],
                    startup=t_add - t_launch, wall=time.monotonic() - t_launch, launcher_rc=rc, load=load)

    def poll(self, deadline, when, allow_exit=False):
        if time.monotonic() > deadline:
            raise TrialError(f'no progress within --trial-timeout {self.args.trial_timeout:.0f} s ({when})')
        if not allow_exit and self.proc.poll() is not None:
            raise TrialError(f'the launcher exited with {self.proc.returncode} {when}')
        return read_records(self.dir)

    def output_tail(self, lines=30):
        try:
            with open(self.output_path, errors='replace') as f:
                return ''.join(f.readlines()[-lines:])
        except OSError:
            return ''

    def cleanup(self):
        """Ends the launcher and every worker it started, then removes the trial's files
        (with Ctrl-C and SIGTERM held off until it is done)."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            self._cleanup()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _cleanup(self):
        worker_pids = []
        try:
            worker_pids = list(read_records(self.dir))
        except (OSError, ValueError):
            pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # kolorun and torchrun stop their workers on SIGTERM
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the launcher's session, torchrun's workers in it
            except (ProcessLookupError, PermissionError):
                pass
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        for pid in worker_pids:  # kolorun's workers, wherever they are now
            if is_our_worker(pid, self.dir):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for _ in range(100):
            if not any(is_our_worker(pid, self.dir) for pid in worker_pids):
                break
            time.sleep(0.05)
        if self.hosts is not None:
            self.hosts.close()
            self.hosts = None
        if self.args.keep_logs:
            os.makedirs(self.args.keep_logs, exist_ok=True)
            keep = os.path.join(self.args.keep_logs, os.path.basename(self.dir))
            shutil.copytree(self.dir, keep, ignore=shutil.ignore_patterns('checkpoint.pt*'))
        shutil.rmtree(self.dir, ignore_errors=True)


def commit_and_memcpy(records, steps_from):
    """Medians over the workers' steps from `steps_from` on (kolo's): commit() (from
    the update applied to the step logged) and the worker's memcpy of the same tensors."""
    commits, copies = [], []
    for rows in records.values():
        trained = {(r[2], r[5]): r[1] for r in rows if r[0] == 'trained'}
        commits += [r[1] - trained[(r[2], r[5])] for r in rows
                    if r[0] == 'step' and r[2] >= steps_from and (r[2], r[5]) in trained]
        copies += [r[2] for r in rows if r[0] == 'memcpy']
    commit = statistics.median(commits) if commits else math.nan
    memcpy = statistics.median(copies) if copies else math.nan
    return dict(commit=commit, memcpy=memcpy, commit_ratio=commit / memcpy if copies and commits else math.nan)


def percentile_50(values):
    return statistics.median(values) if values else math.nan


RECOVERY_CASES = [c for c in CASES + MORE_CASES if '-kill-' in c or '-stop-' in c]


def summarize(results, cases):
    def ok_of(case):
        return [r for r in results if r['case'] == case and not r.get('error')]

    def values(rows, key):
        return [r[key] for r in rows if key in r and not math.isnan(r[key])]

    def med(rows, key, digits=2):
        v = values(rows, key)
        return f'{statistics.median(v):.{digits}f}' if v else '-'

    def stats(rows, key):
        v = values(rows, key)
        return [f'{statistics.median(v):7.2f}', f'{max(v):7.2f}', f'{min(v):7.2f}'] if v else ['-'.rjust(7)] * 3

    def failed(case):
        return sum(1 for r in results if r['case'] == case and r.get('error'))

    lines = []
    recovery_cases = [c for c in cases if c in RECOVERY_CASES]
    if recovery_cases:
        lines += ['recovery: kill (or stop) to the next completed step of every worker of the recovered job, '
                  'less one steady step (seconds)',
                  f'{"case":<22} {"trials":>6} {"failed":>6} {"p50":>7} {"max":>7} {"min":>7}   '
                  f'{"kill to step p50":>16} {"step before":>11} {"step after":>10}']
        for case in recovery_cases:
            ok = ok_of(case)
            lines.append(f'{case:<22} {len(ok):>6} {failed(case):>6} {" ".join(stats(ok, "recovery"))}   '
                         f'{med(ok, "first_step"):>16} {med(ok, "steady_step"):>11} '
                         f'{med(ok, "steady_step_after"):>10}')
        lines += ['',
                  'less the step before the kill instead (p50 / max): ' + '; '.join(
                      f'{case} {med(ok_of(case), "recovery_less_step_before")} / '
                      f'{max(values(ok_of(case), "recovery_less_step_before"), default=math.nan):.2f}'
                      for case in recovery_cases),
                  '',
                  'where the time goes: seconds after the kill, slowest worker, medians over the trials',
                  f'{"case":<22} {"detect":>8} {"restored":>8} {"re-formed":>9} {"synced":>8} {"first step":>10}']
        for case in recovery_cases:
            ok = ok_of(case)
            if ok:
                lines.append(f'{case:<22} {med(ok, "detect"):>8} {med(ok, "restored"):>8} {med(ok, "reset"):>9} '
                             f'{med(ok, "synced"):>8} {med(ok, "first_step"):>10}')
        lines += ['  detect: kolo, the survivors\' run() caught the failure and restores the commit; torchrun, '
                  'the restarted workers\' processes started',
                  '  restored: kolo, the last commit loaded back into model and optimizer',
                  '  re-formed: kolo, reset() done (the new generation met); synced: kolo, state synced and '
                  'training re-entered; torchrun, torch imported, process group, checkpoint loaded and DDP built']
        if 'kolo-stop-rank2' in recovery_cases:
            lines.append(f'  kolo-stop-rank2 runs with KOLO_PEER_TIMEOUT={STOP_PEER_TIMEOUT}: its target is '
                         f'{STOP_PEER_TIMEOUT + 1} s')
    if 'kolo-add-worker' in cases:
        ok = ok_of('kolo-add-worker')
        lines += ['' if lines else None,
                  f'a worker added ({NP - 1} -> {NP}; seconds): {len(ok)} trials, {failed("kolo-add-worker")} failed',
                  f'{"":<34} {"p50":>7} {"max":>7} {"min":>7}',
                  f'{"survivors pause, less a step":<34} {" ".join(stats(ok, "pause"))}',
                  f'{"joiner: init() to its first step":<34} {" ".join(stats(ok, "joiner_init_to_step"))}',
                  f'{"joiner: run() to its first step":<34} {" ".join(stats(ok, "joiner_ready_to_step"))}',
                  f'{"hosts file changed to its step":<34} {" ".join(stats(ok, "add_to_joiner_step"))}',
                  f'{"the state broadcast (the link)":<34} {" ".join(stats(ok, "state_broadcast"))}',
                  f'{"pause less (broadcast + 0.5 s)":<34} {" ".join(stats(ok, "pause_over_budget"))}',
                  f'survivors rolled back: {sum(r.get("rolled_back", 0) for r in ok)} of {len(ok)} trials; '
                  f'state {med(ok, "state_mib", 0)} MiB (model and momentum)']
    steady_cases = [c for c in ('kolo-steady-elastic', 'kolo-steady-plain') if c in cases]
    if steady_cases:
        lines += ['' if lines else None, 'steady step without membership changes (seconds; p50, max, min):']
        for case in steady_cases:
            ok = ok_of(case)
            lines.append(f'{case:<22} {len(ok):>3} trials {" ".join(stats(ok, "steady_step"))}')
        if len(steady_cases) == 2:
            by_trial = {}
            for r in results:
                if r['case'] in steady_cases and not r.get('error'):
                    by_trial.setdefault(r['trial'], {})[r['case']] = r['steady_step']
            ratios = [t['kolo-steady-elastic'] / t['kolo-steady-plain'] for t in by_trial.values() if len(t) == 2]
            if ratios:
                lines.append(f'elastic / plain, trial by trial: p50 {statistics.median(ratios):.3f}, '
                             f'range {min(ratios):.3f} to {max(ratios):.3f} ({len(ratios)} pairs)')
    # kolo-commit copies the state after every commit, in the same conditions;
    # without it, the other kolo trials' one copy after step 1 is the reference.
    kolo_rows = [r for r in results if r['case'] == 'kolo-commit' and not r.get('error')]
    which = 'kolo-commit trials: a copy after every commit'
    if not kolo_rows:
        kolo_rows = [r for r in results if r['case'].startswith('kolo') and not r.get('error')]
        which = 'every kolo trial: one copy after step 1'
    if values(kolo_rows, 'commit_ratio'):
        lines += ['' if lines else None,
                  f'commit() of model and momentum: p50 {med(kolo_rows, "commit", 3)} s against a memcpy of the same '
                  f'tensors {med(kolo_rows, "memcpy", 3)} s; ratio p50 {med(kolo_rows, "commit_ratio")}, max '
                  f'{max(values(kolo_rows, "commit_ratio")):.2f} ({which}; workers\' medians)']
    return '\n'.join(line for line in lines if line is not None)


def write_outputs(results, cases, args, summary, header):
    os.makedirs(args.out, exist_ok=True)
    keys = ['trial', 'case', 'recovery', 'recovery_less_step_before', 'fastest_worker', 'first_step', 'steady_step',
            'steady_step_after', 'subtracted', 'detect', 'restored', 'reset', 'synced', 'pause',
            'joiner_init_to_step', 'joiner_ready_to_step', 'add_to_joiner_step', 'state_broadcast',
            'pause_over_budget', 'rolled_back', 'state_mib', 'commit', 'memcpy',
            'commit_ratio', 'size_after', 'workers_after', 'phase', 'kill_syscall', 'startup', 'wall', 'load',
            'launcher_rc', 'error']
    with open(os.path.join(args.out, 'trials.csv'), 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=keys, extrasaction='ignore')
        writer.writeheader()
        for r in results:
            writer.writerow({k: (f'{r[k]:.4f}' if isinstance(r.get(k), float) else r.get(k, '')) for k in keys})
    with open(os.path.join(args.out, 'summary.txt'), 'w') as f:
        f.write(header + '\n\n' + summary + '\n')


def plot(results, cases, path):
    if shutil.which('gnuplot') is None:
        print('elastic_recovery: gnuplot is not installed; no plot', file=sys.stderr)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix='elastic-recovery-plot-') as tmp:
        points = os.path.join(tmp, 'points.dat')
        stats = os.path.join(tmp, 'stats.dat')
        with open(points, 'w') as p, open(stats, 'w') as s:
            for i, case in enumerate(cases):
                rec = [r['recovery'] for r in results if r['case'] == case and not r.get('error')]
                for j, v in enumerate(rec):
                    jitter = (j % 7 - 3) * 0.04
                    p.write(f'{i} {i + jitter} {v}\n')
                if rec:
                    s.write(f'{i} {statistics.median(rec)} {min(rec)} {max(rec)} "{case}"\n')
        shown = [r for r in results if r['case'] in cases and not r.get('error')]
        log_scale = all(r['recovery'] > 0 for r in shown)  # else a linear axis
        xtics = ', '.join(f'"{c}" {i}' for i, c in enumerate(cases))
        script = f'''
set terminal pngcairo size 900,540 font ',10'
set output '{path}'
set title 'Recovery after SIGKILL (or SIGSTOP) of one of 4 workers, one host (lower is better)'
set ylabel 'kill to next completed step, less one steady step (s)'
{'set logscale y 10' if log_scale else 'set yrange [*:*]'}
set grid ytics
set xrange [-0.6:{len(cases) - 0.4}]
set xtics ({xtics})
set key top left
set arrow from -0.6,1 to {len(cases) - 0.4},1 nohead dashtype 2 linecolor rgb '#888888'
set label 'target: 1 s' at -0.55,1.12 textcolor rgb '#666666'
plot '{points}' using 2:3 with points pointtype 7 pointsize 0.7 linecolor rgb '#4477aa' title 'trial', \\
     '{stats}' using 1:2:3:4 with yerrorbars pointtype 5 pointsize 1.4 linecolor rgb '#cc3311' linewidth 2 \\
        title 'median, min to max'
'''
        subprocess.run(['gnuplot'], input=script, text=True, check=True)
    print(f'elastic_recovery: wrote {path}')


def machine_header(args):
    try:
        with open('/etc/debian_version') as f:
            debian = f.read().strip()
    except OSError:
        debian = '?'
    try:
        load = ' '.join(f'{v:.2f}' for v in os.getloadavg())
    except OSError:
        load = '?'
    mem_gib = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30
    commit = subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(['git', '-C', ROOT, 'status', '--porcelain', '--untracked-files=no'],
                           capture_output=True, text=True).stdout.strip()
    params = args.layers * (args.width * args.width + args.width)
    return (f'# elastic_recovery  {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}  kolo {commit}'
            f'{" (working tree with uncommitted changes)" if dirty else ""}\n'
            f'# machine: {os.cpu_count()} CPUs, {mem_gib:.1f} GiB, Debian {debian}, load average at start {load}\n'
            f'# model: {args.layers} x nn.Linear({args.width}, {args.width}), {params:,} float32 parameters, '
            f'SGD momentum 0.9, batch {args.batch}, {args.threads} thread(s) per worker; {NP} workers\n'
            f'# trials: {args.trials} per case, interleaved; kill after step {args.kill_after} at a random phase '
            f'of a step; {args.steps_after} steps after it')


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--trials', type=int, default=20, help='trials per case (default 20)')
    parser.add_argument('--cases', default=','.join(CASES), help=f'comma-separated, of {",".join(CASES)}')
    parser.add_argument('--layers', type=int, default=6)
    parser.add_argument('--width', type=int, default=2048)
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--threads', type=int, default=1, help='torch and OpenBLAS threads per worker')
    parser.add_argument('--kill-after', type=int, default=8, help='steps every worker completes before the kill')
    parser.add_argument('--steps-after', type=int, default=5, help='steps the job trains after the killed one')
    parser.add_argument('--trial-timeout', type=float, default=300, help='seconds one trial may take')
    parser.add_argument('--seed', type=int, default=1, help='seed of the kill phases')
    parser.add_argument('--build-dir', default=os.path.join(ROOT, 'build'))
    parser.add_argument('--kolorun', help='default: BUILD_DIR/tools/kolorun/kolorun')
    parser.add_argument('--torchrun', default='/usr/bin/torchrun')
    parser.add_argument('--tmp', default=None, help='where the trials\' files go (default: $TMPDIR or /tmp)')
    parser.add_argument('--out', help='write trials.csv and summary.txt here')
    parser.add_argument('--plot', help='draw the trials as a PNG here (gnuplot)')
    parser.add_argument('--keep-logs', help='copy each trial\'s launcher log and step files here')
    parser.add_argument('--quick', action='store_true',
                        help='smoke test: 2 trials, 2 x nn.Linear(1024, 1024), batch 64, kill after 5 steps, 8 after')
    args = parser.parse_args()
    if args.quick:
        args.trials, args.layers, args.width, args.batch, args.kill_after, args.steps_after = 2, 2, 1024, 64, 5, 8
    args.kolorun = args.kolorun or os.path.join(args.build_dir, 'tools', 'kolorun', 'kolorun')
    cases = [c for c in args.cases.split(',') if c]
    for case in cases:
        if case not in CASES + MORE_CASES:
            parser.error(f'unknown case {case!r}; the cases are {", ".join(CASES + MORE_CASES)}')
    if any(c.startswith('kolo') for c in cases) and not os.access(args.kolorun, os.X_OK):
        parser.error(f'no kolorun at {args.kolorun} (build it: cmake --build build --target kolorun '
                     'kolo_python_extension)')
    if any(c.startswith('torchrun') for c in cases) and not os.access(args.torchrun, os.X_OK):
        parser.error(f'no torchrun at {args.torchrun} (Debian\'s python3-torch)')
    if args.kill_after < 5:
        parser.error('--kill-after must be at least 5 (the steady step leaves out the first two steps)')

    # SIGINT (also where a shell started the script in the background with SIGINT
    # ignored), SIGTERM and SIGHUP end it through the cleanup below.
    def interrupted(signum, frame):
        raise KeyboardInterrupt
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)

    header = machine_header(args)
    print(header, flush=True)
    base_tmp = tempfile.mkdtemp(prefix='elastic-recovery-', dir=args.tmp)
    results = []
    rng = random.Random(args.seed)
    t0 = time.monotonic()
    trial = None
    try:
        for i in range(args.trials):
            phase = rng.random()
            order = cases[i % len(cases):] + cases[:i % len(cases)]  # each case leads in turn
            for case in order:
                trial = Trial(case, args, phase, base_tmp)
                try:
                    result = trial.run()
                except TrialError as e:
                    result = dict(case=case, phase=phase, error=str(e))
                    print(f'trial {i + 1} {case}: FAILED: {e}\n{trial.output_tail()}', file=sys.stderr, flush=True)
                finally:
                    trial.cleanup()
                    trial = None
                result['trial'] = i + 1
                results.append(result)
                if not result.get('error') and 'recovery' not in result:
                    print(f'trial {i + 1:>2} {case:<20} ' + ', '.join(
                        f'{k} {result[k]:.3f}' for k in ('steady_step', 'commit', 'memcpy', 'pause',
                                                         'joiner_init_to_step', 'joiner_ready_to_step',
                                                         'add_to_joiner_step')
                        if k in result), flush=True)
                elif not result.get('error'):
                    print(f'trial {i + 1:>2} {case:<20} recovery {result["recovery"]:6.2f} s  (kill to first step '
                          f'{result["first_step"]:5.2f} s, detect {result["detect"]:5.2f}, synced '
                          f'{result["synced"]:5.2f}, steady step {result["steady_step"]:.2f} s before, '
                          f'{result["steady_step_after"]:.2f} s after; phase {phase:.2f}; job {result["wall"]:.0f} s)',
                          flush=True)
    except KeyboardInterrupt:
        print('elastic_recovery: interrupted; cleaning up (the table below has the trials done)', file=sys.stderr)
        if trial is not None:
            trial.cleanup()
        interrupted_at = len(results)
    else:
        interrupted_at = None
    finally:
        shutil.rmtree(base_tmp, ignore_errors=True)
    # Ctrl-C again while the results are written ends the script at once.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    summary = summarize(results, cases)
    summary += f'\n\nthe run took {time.monotonic() - t0:.0f} s; load average at the end ' \
               f'{" ".join(f"{v:.2f}" for v in os.getloadavg())}'
    if interrupted_at is not None:
        summary += f'; interrupted after {interrupted_at} trial(s)'
    print()
    print(summary)
    if args.out:
        write_outputs(results, cases, args, summary, header)
    plotted = [c for c in cases if c in RECOVERY_CASES]
    if args.plot and plotted and results:
        plot(results, plotted, args.plot)
    if interrupted_at is not None:
        return 130
    return 1 if any(r.get('error') for r in results) else 0

if __name__ == '__main__':
    sys.exit(main())

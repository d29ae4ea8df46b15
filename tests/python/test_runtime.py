"""The session, threads, signals and forks: what a Python training script relies on."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import kolo.torch as hvd
from kolo.torch import _kolo
from conftest import on_rank_0


def test_basics_and_what_was_built():
    assert hvd.is_initialized()
    hvd.init()  # a second init() is harmless
    assert 0 <= hvd.rank() < hvd.size()
    # As kolorun placed the ranks (on one host, or across several).
    placement = [int(os.environ[name]) for name in ('KOLO_RANK', 'KOLO_LOCAL_RANK', 'KOLO_LOCAL_SIZE',
                                                    'KOLO_CROSS_RANK', 'KOLO_CROSS_SIZE')]
    assert [hvd.rank(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()] == placement
    assert hvd.is_homogeneous()
    if 'KOLO_BACKEND' not in os.environ and 'KOLO_HIERARCHICAL' not in os.environ and hvd.size() > 1:
        # Chosen by the job's layout: shared memory on one host, else shared
        # memory within each host and kolo's TCP communicator between them.
        assert _kolo.backend() == ('hierarchical' if hvd.cross_size() > 1 else 'shm')
        assert not hvd.gloo_enabled()
    assert hvd.mpi_built() and hvd.gloo_built()
    assert not hvd.nccl_built() and not hvd.cuda_built()
    assert not hvd.mpi_enabled()
    with pytest.raises(ValueError):
        hvd.mpi_threads_supported()
    assert os.environ['HOROVOD_RANK'] == str(hvd.rank())
    assert os.environ['HOROVOD_SIZE'] == str(hvd.size())


def test_a_blocking_call_does_not_stop_other_python_threads():
    # Rank 0 waits about a second for the others; meanwhile its other thread runs.
    if hvd.rank() != 0:
        time.sleep(1.0)
    counted = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    started = time.monotonic()
    result = hvd.allreduce(torch.ones(3), op=hvd.Sum, name='threads.blocking')
    waited = time.monotonic() - started
    stop.set()
    counter.join()
    assert torch.equal(result, torch.full((3,), float(hvd.size())))
    if hvd.rank() == 0:
        assert waited > 0.5
        assert counted[0] > 10000, 'the counting thread ran while the allreduce waited'


def test_collectives_from_several_threads():
    results = {}

    def worker(i):
        results[i] = hvd.allreduce(torch.full((2,), float(i)), op=hvd.Sum, name=f'threads.{i}')

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in reversed(threads) if hvd.rank() % 2 else threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert torch.equal(results[i], torch.full((2,), float(i * hvd.size())))


def test_a_signal_handler_acts_during_a_blocking_call():
    # Rank 0 blocks on an operation the others submit only 3 s later; its timer's
    # handler must raise within a fraction of a second, not after the call returns.
    if hvd.rank() == 0:
        def interrupt(signum, frame):
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            hvd.allreduce(torch.ones(1000), name='signals.late')
        elapsed = time.monotonic() - started
        signal.signal(signal.SIGALRM, previous)
        assert elapsed < 1.0, f'the handler ran {elapsed:.2f} s after the signal'
    else:
        time.sleep(3.0)
        hvd.allreduce(torch.ones(1000), name='signals.late')
    # The interrupted operation finished in the background; the job goes on.
    hvd.barrier()
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, name='signals.after'),
                       torch.full((1,), float(hvd.size())))


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])


def test_a_dataloader_with_forked_workers():
    loader = torch.utils.data.DataLoader(Squares(), batch_size=4, num_workers=2,
                                         multiprocessing_context='fork')
    total = sum(batch.sum().item() for batch in loader)
    assert total == sum(i * i for i in range(16))
    out = hvd.allreduce(torch.tensor([total]), op=hvd.Sum, name='dataloader.total')
    assert out.item() == total * hvd.size()


def test_a_dropped_handle_keeps_its_tensors_until_done():
    handles = [hvd.allreduce_async(torch.ones(1 << 16), op=hvd.Sum, name=f'dropped.{i}') for i in range(4)]
    del handles  # kolo still writes the outputs; they must outlive the handles
    hvd.barrier()
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name='dropped.after'),
                       torch.full((2,), float(hvd.size())))


def test_shutdown_then_init_starts_a_new_session():
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(hvd.ShutdownError):
        hvd.allreduce(torch.ones(1), name='after.shutdown')
    # As Horovod: the queries raise a ValueError before init(), the two backend
    # queries say False.
    for query in (hvd.size, hvd.rank, hvd.local_size, hvd.is_homogeneous):
        with pytest.raises(ValueError):
            query()
    assert not hvd.mpi_enabled() and not hvd.gloo_enabled()
    hvd.init()
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name='new.session'),
                       torch.full((2,), float(hvd.size())))


def test_a_timeline_started_from_python(tmp_path):
    path = hvd.broadcast_object(str(tmp_path / 'timeline.json'), root_rank=0, name='timeline.path')
    hvd.start_timeline(path)
    for _ in range(3):
        hvd.allreduce(torch.ones(8), name='traced')
    hvd.stop_timeline()
    if hvd.rank() == 0:
        with open(path) as f:
            trace = json.load(f)
        names = {e['args']['name'] for e in trace if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
        assert 'allreduce.traced' in names, names


@pytest.mark.skipif('KOLORUN' not in os.environ, reason='needs KOLORUN, the kolorun binary (set by ctest)')
def test_a_stalled_peer_is_named_as_an_exception():
    # A job of its own, from rank 0 alone, so that stopping a rank leaves this one alone.
    def run_job():
        env = dict(os.environ, KOLO_PEER_TIMEOUT='3')
        script = os.path.join(os.path.dirname(__file__), 'programs', 'stalled_peer.py')
        started = time.monotonic()
        result = subprocess.run([os.environ['KOLORUN'], '-np', '2', sys.executable, script], env=env,
                                capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - started
        assert 'PeerFailureError peer_rank=1' in result.stdout, result.stdout + result.stderr
        assert elapsed < 30, elapsed
    on_rank_0(run_job)


def test_a_rank_that_raises_is_named_with_its_exception():
    # kolo.torch's excepthook tells the others: the exit would otherwise be an
    # orderly shutdown, which they would report as one.
    def run_job():
        script = os.path.join(os.path.dirname(__file__), 'programs', 'raising_rank.py')
        result = subprocess.run([os.environ['KOLORUN'], '-np', '3', sys.executable, script], env=dict(os.environ),
                                capture_output=True, text=True, timeout=120)
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        for other in (0, 2):
            line = next((x for x in result.stdout.splitlines() if f'rank {other}: PeerFailureError' in x), None)
            assert line is not None, output
            assert 'peer_rank=1' in line and 'ValueError: boom at step 5' in line, line
        assert 'ShutdownError' not in output, output
        # kolorun names the rank that failed first, not one that failed because of it.
        first = next(x for x in result.stderr.splitlines() if x.startswith('kolorun: '))
        assert first.startswith('kolorun: rank 1 ') or first.startswith('kolorun: rank 1 failed first'), output
    on_rank_0(run_job)


@pytest.mark.skipif('KOLORUN' not in os.environ, reason='needs KOLORUN, the kolorun binary (set by ctest)')
def test_a_test_failing_on_one_rank_ends_the_suite_at_once(tmp_path):
    # A suite of its own under the suite's pytest.ini, from rank 0 alone; its
    # stall shutdown is long, so that only stopping at the failure ends it soon.
    def run_suite():
        env = dict(os.environ, DIVERGING_MARKERS=str(tmp_path), KOLO_STALL_CHECK_TIME='10',
                   KOLO_STALL_SHUTDOWN_TIME='90')
        suite = os.path.join(os.path.dirname(__file__), 'programs', 'diverging_tests.py')
        started = time.monotonic()
        result = subprocess.run([os.environ['KOLORUN'], '-np', '2', sys.executable, '-m', 'pytest', '-q', '-p',
                                 'no:cacheprovider', suite], env=env, capture_output=True, text=True, timeout=300)
        elapsed = time.monotonic() - started
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert 'test_fails_on_rank_1_before_its_collective' in output, output
        assert sorted(p.name for p in tmp_path.iterdir()) == [], output
        assert elapsed < 45, (elapsed, output)
    on_rank_0(run_suite)


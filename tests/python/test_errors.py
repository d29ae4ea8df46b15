"""Every error reaches every rank with the same message as a Python exception of
Horovod's kind, and the next call works."""

import pytest
import torch

import kolo.torch as hvd


def same_message_everywhere(message):
    messages = hvd.allgather_object(message, name='error.messages')
    assert len(set(messages)) == 1, messages


def works_after():
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name='works.after')
    assert torch.equal(out, torch.full((2,), float(hvd.size())))


def test_shape_mismatch_names_the_tensor_and_both_shapes_on_every_rank():
    shape = (2 + hvd.rank(),)
    with pytest.raises(hvd.MismatchError) as error:
        hvd.allreduce(torch.ones(shape), name='mismatched.shape')
    message = str(error.value)
    assert isinstance(error.value, RuntimeError)
    assert 'mismatched.shape' in message
    assert '[2]' in message and '[3]' in message
    same_message_everywhere(message)
    works_after()


def test_dtype_mismatch():
    dtype = torch.float32 if hvd.rank() == 0 else torch.float64
    with pytest.raises(hvd.MismatchError) as error:
        hvd.allreduce(torch.ones(3, dtype=dtype), name='mismatched.dtype')
    assert 'float32' in str(error.value) and 'float64' in str(error.value)
    same_message_everywhere(str(error.value))
    works_after()


def test_op_and_root_mismatches():
    with pytest.raises(hvd.MismatchError):
        hvd.allreduce(torch.ones(3), op=hvd.Sum if hvd.rank() == 0 else hvd.Max, name='mismatched.op')
    with pytest.raises(hvd.MismatchError):
        hvd.broadcast(torch.ones(3), root_rank=hvd.rank() % 2, name='mismatched.root')
    works_after()


def test_async_mismatch_raises_at_synchronize():
    handle = hvd.allreduce_async(torch.ones(1 + hvd.rank()), name='mismatched.async')
    with pytest.raises(hvd.MismatchError):
        hvd.synchronize(handle)
    works_after()


def test_duplicate_name_in_flight_is_a_value_error():
    # Each rank submits a name again while its first submission cannot have
    # completed: rank 0 offers the others' name only after the barrier, which
    # they reach after their check, and they offer rank 0's after it too (the
    # last rank to offer a small allreduce may finish it at once).
    if hvd.size() == 1:
        pytest.skip('needs a peer to hold the first submission in flight')
    names = ['duplicate.zero', 'duplicate.others']
    mine, theirs = names if hvd.rank() == 0 else names[::-1]
    first = hvd.allreduce_async(torch.ones(4), name=mine)
    with pytest.raises(ValueError, match='already in flight'):
        hvd.allreduce_async(torch.ones(4), name=mine)
    hvd.barrier()
    second = hvd.allreduce_async(torch.ones(4), name=theirs)
    hvd.synchronize(first)
    hvd.synchronize(second)
    works_after()


def test_bad_arguments_on_this_rank():
    with pytest.raises(ValueError, match='Adasum'):
        hvd.allreduce(torch.ones(2), op=hvd.Adasum)
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(2), op=hvd.Sum, average=True)
    with pytest.raises(ValueError, match='ComplexFloat'):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64), name='complex')
    with pytest.raises(ValueError):
        hvd.reducescatter(torch.ones(2), op=hvd.Max)
    with pytest.raises(ValueError, match='not a registered process set'):
        hvd.allreduce(torch.ones(2), process_set=hvd.ProcessSet([0]))
    works_after()


def test_average_of_bool_is_refused_on_every_rank():
    with pytest.raises((hvd.MismatchError, ValueError)) as error:
        hvd.allreduce(torch.ones(3, dtype=torch.bool), op=hvd.Average, name='bool.average')
    same_message_everywhere(str(error.value))
    works_after()


def test_alltoall_with_splits_that_do_not_add_up():
    with pytest.raises((ValueError, hvd.MismatchError)):
        hvd.alltoall(torch.ones(3), splits=[5] * hvd.size(), name='bad.splits')
    works_after()


def test_exception_hierarchy_is_horovods():
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert issubclass(hvd.PeerFailureError, hvd.HorovodInternalError)
    assert issubclass(hvd.ShutdownError, hvd.HorovodInternalError)
    assert issubclass(hvd.MismatchError, hvd.HorovodInternalError)
    assert issubclass(hvd.InvalidArgumentError, ValueError)
    assert issubclass(hvd.InvalidArgumentError, hvd.HorovodInternalError)
    assert issubclass(hvd.ShutdownError, ValueError)


def test_two_threads_at_one_unnamed_call_site_are_refused_on_every_rank():
    import threading
    import time

    def submit(value):  # one call site for both threads
        return hvd.allreduce_async(value, op=hvd.Sum)

    if hvd.rank() == 1:  # rank 0's first operation is still in flight when its second thread submits
        time.sleep(0.3)
    handles = []
    for value in (torch.ones(1), torch.full((1,), 10.0)):
        thread = threading.Thread(target=lambda v=value: handles.append(submit(v)))
        thread.start()
        thread.join()
    assert hvd.synchronize(handles[0]).item() == hvd.size()
    with pytest.raises(hvd.InvalidArgumentError, match='two threads in flight at once') as refused:
        hvd.synchronize(handles[1])
    assert 'names of their own' in str(refused.value)
    same_message_everywhere(str(refused.value))
    works_after()

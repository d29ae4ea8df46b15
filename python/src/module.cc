// The extension module kolo.torch._kolo: session control, what was built, the
// exceptions, and the collectives (operations.cc).
#include "binding.h"
#include "kolo/internal/fail.h"
#include "kolo/elastic.h"
#include "kolo/error.h"
#include "kolo/process_set.h"
#include "kolo/runtime.h"

namespace kolo::python {
namespace {

// The exception types, made once at import and kept for the life of the process
// (a translator may run at any time, also during interpreter shutdown).
struct Exceptions {
  PyObject* internal = nullptr;      // HorovodInternalError: every error of kolo's core
  PyObject* peer_failure = nullptr;  // a peer died, stalled or broke the protocol
  PyObject* shutdown = nullptr;      // kolo is not running
  PyObject* timeout = nullptr;       // a wait ran out of time
  PyObject* mismatch = nullptr;      // ranks disagree on an operation
  PyObject* invalid = nullptr;       // a bad argument (a ValueError too)
};
Exceptions exceptions;

PyObject* new_exception(py::module_& m, const char* name, std::initializer_list<PyObject*> bases, const char* doc) {
  py::tuple base_tuple(bases.size());
  std::size_t i = 0;
  for (PyObject* base : bases) base_tuple[i++] = py::reinterpret_borrow<py::object>(base);
  const std::string qualified = std::string("kolo.torch.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.attr(name) = py::reinterpret_borrow<py::object>(type);
  return type;  // one reference kept for good
}

void define_exceptions(py::module_& m) {
  exceptions.internal = new_exception(m, "HorovodInternalError", {PyExc_RuntimeError},
                                      "An error of kolo's core, as Horovod's: the job's communication failed (the "
                                      "subclasses PeerFailureError, ShutdownError, OperationTimeoutError), or ranks "
                                      "disagree (MismatchError), or an argument is bad (InvalidArgumentError).");
  exceptions.peer_failure = new_exception(m, "PeerFailureError", {exceptions.internal},
                                          "Another rank died, stalled past KOLO_PEER_TIMEOUT or broke the "
                                          "protocol; peer_rank names it (-1 when unknown).");
  // A ValueError too: Horovod's queries raise one before init().
  exceptions.shutdown = new_exception(m, "ShutdownError", {exceptions.internal, PyExc_ValueError},
                                      "kolo is not initialized, or was shut down.");
  exceptions.timeout =
      new_exception(m, "OperationTimeoutError", {exceptions.internal, PyExc_TimeoutError}, "A wait ran out of time.");
  // Horovod raises every error of its core's as a HorovodInternalError; so do these.
  exceptions.mismatch = new_exception(m, "MismatchError", {exceptions.internal},
                                      "Ranks submitted one operation name with disagreeing arguments; every rank "
                                      "gets the same message, and the job goes on.");
  exceptions.invalid = new_exception(m, "InvalidArgumentError", {PyExc_ValueError, exceptions.internal},
                                     "A bad argument (a ValueError, and a HorovodInternalError as Horovod's).");

  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const PeerFailureError& e) {
      PyObject* instance = PyObject_CallFunction(exceptions.peer_failure, "s", e.what());
      if (instance == nullptr) return;  // the call's own error stands
      PyObject* rank = PyLong_FromLong(e.peer_rank());
      PyObject_SetAttrString(instance, "peer_rank", rank);
      Py_XDECREF(rank);
      PyErr_SetObject(exceptions.peer_failure, instance);
      Py_DECREF(instance);
    } catch (const ShutdownError& e) {
      PyErr_SetString(exceptions.shutdown, e.what());
    } catch (const TimeoutError& e) {
      PyErr_SetString(exceptions.timeout, e.what());
    } catch (const MismatchError& e) {
      PyErr_SetString(exceptions.mismatch, e.what());
    } catch (const InvalidArgumentError& e) {
      PyErr_SetString(exceptions.invalid, e.what());
    } catch (const Error& e) {
      PyErr_SetString(exceptions.internal, e.what());
    }
  });
}

// `ranks`: the job ranks of a world of some of them (Horovod's init(comm=...)).
void init(const std::optional<std::vector<int>>& ranks) {
  if (kolo::is_initialized()) return;  // as Horovod: a second init() is harmless
  py::gil_scoped_release released;     // init() waits for every rank to arrive
  if (ranks)
    kolo::init(*ranks);
  else
    kolo::init();
}

void shutdown() {
  {
    py::gil_scoped_release released;  // completes or fails what is pending
    kolo::shutdown();
  }
  release_finished();
}

// An uncaught exception is ending this rank's program (kolo/torch/__init__.py's
// excepthook): the others learn it as this rank's failure, with `reason`, instead
// of the orderly shutdown that the exit would then run.
void fail(const std::string& reason) {
  py::gil_scoped_release released;
  kolo::runtime::fail(reason);
}

py::dict built() {
  py::dict d;
#ifdef KOLO_PYTHON_HAVE_MPI
  d["mpi"] = true;
#else
  d["mpi"] = false;
#endif
#ifdef KOLO_PYTHON_HAVE_GLOO
  d["gloo"] = true;
#else
  d["gloo"] = false;
#endif
  return d;
}

}  // namespace
}  // namespace kolo::python

PYBIND11_MODULE(_kolo, m) {
  using namespace kolo::python;
  m.doc() = "kolo's engine for kolo.torch; use the functions of kolo.torch, not these.";
  define_exceptions(m);
  m.def("init", &init, py::arg("ranks") = py::none());
  m.def("shutdown", &shutdown);
  m.def("fail", &fail, py::arg("reason"));
  m.def("_elastic_enabled", &kolo::elastic::enabled);
  m.def("_elastic_reset", [] {
    py::gil_scoped_release released;
    kolo::elastic::reset();
  });
  m.def("_elastic_hosts_updated", &kolo::elastic::hosts_updated);
  m.def("_hosts_alike", &kolo::hosts_alike);
  m.def("_elastic_awaits_admission", &kolo::elastic::awaits_admission);
  m.def("_elastic_admit", [] {
    py::gil_scoped_release released;
    return kolo::elastic::admit();
  });
  m.def("_elastic_differ_from_rank_0", [](const std::vector<std::uint64_t>& digests, const std::string& name) {
    py::gil_scoped_release released;
    return kolo::elastic::differ_from_rank_0(digests, name);
  }, py::arg("digests"), py::arg("name"));
  m.def("works_in_shared_buffers", &kolo::works_in_shared_buffers);
  m.def("is_initialized", &kolo::is_initialized);
  m.def("rank", &kolo::rank);
  m.def("size", &kolo::size);
  m.def("local_rank", &kolo::local_rank);
  m.def("local_size", &kolo::local_size);
  m.def("cross_rank", &kolo::cross_rank);
  m.def("cross_size", &kolo::cross_size);
  m.def("backend", &kolo::backend);
  m.def("start_timeline", &kolo::start_timeline);
  m.def("stop_timeline", &kolo::stop_timeline);
  m.def("add_process_set", [](std::vector<int> ranks) { return kolo::add_process_set(std::move(ranks)).id; });
  m.def("remove_process_set", [](int id) { kolo::remove_process_set(kolo::ProcessSet{id}); });
  m.def("process_set_ranks", [](int id) { return kolo::process_set_ranks(kolo::ProcessSet{id}); });
  m.def("built", &built, "Which optional transports this kolo was built with.");
  m.def("set_package_dir", &set_package_dir);
  m.def("release_finished", &release_finished);
  define_operations(m);
  define_compressors(m);
}

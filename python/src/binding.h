// What the sources of the kolo.torch extension (module _kolo) share.
//
// The extension is thin: it turns torch tensors into kolo views without copying,
// starts kolo's collectives, and waits for them the way Python needs (the GIL
// released, Python's signal handlers run between slices). Argument handling in
// Horovod's style lives in the Python modules above it.
#pragma once

// The at::Tensor <-> torch.Tensor casters, without the whole of <torch/extension.h>.
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <vector>

#include "kolo/handle.h"
#include "kolo/types.h"

namespace kolo::python {

namespace py = pybind11;

// ---- naming.cc ---------------------------------------------------------------------------

// Where the package's own Python files lie: frames there are not call sites.
void set_package_dir(std::string dir);
// The operation's name: Horovod's "<op>.<name>" for a given name, else one made
// from the first Python caller outside the package (its file and line, and how
// often that line has submitted), which agrees across ranks running one script.
// Takes the GIL as held.
std::string operation_name(const char* op, const std::optional<std::string>& name);

// ---- waiting.cc --------------------------------------------------------------------------

// Waits for `handle` (an invalid Handle is an operation already done) with the GIL
// released, in slices between which Python's signal handlers run: a handler's
// exception (KeyboardInterrupt) leaves as py::error_already_set, the operation
// still running. Rethrows the operation's kolo::Error. Takes the GIL as held.
void wait_interruptibly(const Handle& handle);

// Keeps `tensors` alive until `handle` is done: kolo may still read or write them
// after the Python object that held them is gone (a dropped handle, an interrupted
// wait).
void keep_until_done(Handle handle, std::vector<at::Tensor> tensors);
// Drops what keep_until_done() held for operations that have finished.
void release_finished();

// ---- operations.cc -----------------------------------------------------------------------

void define_operations(py::module_& module);

// ---- compressors.cc ----------------------------------------------------------------------

void define_compressors(py::module_& module);

}  // namespace kolo::python

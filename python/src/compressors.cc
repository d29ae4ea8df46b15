// Gradient compressors (kolo::torch::GradientCompressor) for kolo.torch's
// DistributedOptimizer: the C++ objects themselves, so that a Python and a C++
// training compress with the same code and get the same bits.
#include "binding.h"
#include "kolo/process_set.h"
#include "kolo/runtime.h"
#include "kolo/torch/powersgd.h"

namespace kolo::python {

void define_compressors(py::module_& m) {
  using kolo::torch::PowerSGD;
  using kolo::torch::PowerSGDOptions;
  using py::arg;
  m.def("session_number", &kolo::session_number);
  py::class_<PowerSGD, std::shared_ptr<PowerSGD>>(m, "PowerSGD", "kolo::torch::PowerSGD (powersgd.h).")
      .def(py::init([](int rank, std::int64_t start_step, std::int64_t min_size, bool warm_start, bool error_feedback,
                       std::uint64_t seed) {
             return std::make_shared<PowerSGD>(
                 PowerSGDOptions{rank, start_step, min_size, warm_start, error_feedback, seed});
           }),
           arg("rank"), arg("start_step"), arg("min_size"), arg("warm_start"), arg("error_feedback"), arg("seed"))
      .def("bind", [](PowerSGD& self, bool average, int process_set, const std::string& name_prefix) {
             self.bind({average ? ReduceOp::Average : ReduceOp::Sum, ProcessSet{process_set}, name_prefix});
           }, arg("average"), arg("process_set"), arg("name_prefix"))
      .def("settings", &PowerSGD::settings)
      .def("takes", &PowerSGD::takes, arg("grad"))
      .def("add", &PowerSGD::add, arg("name"), arg("grad"))
      .def("finish", &PowerSGD::finish, py::call_guard<py::gil_scoped_release>())
      .def("abandon", &PowerSGD::abandon)
      .def("check_settings_agree", [](const PowerSGD& self) { kolo::torch::check_settings_agree(self); },
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("steps", &PowerSGD::steps)
      .def_property_readonly("last_sent_elements", &PowerSGD::last_sent_elements)
      .def_property_readonly("last_compressed_elements", &PowerSGD::last_compressed_elements)
      .def_property_readonly("last_allreduces", &PowerSGD::last_allreduces)
      .def("memory", &PowerSGD::memory)
      .def("load_memory", &PowerSGD::load_memory, arg("memory"));
}

}  // namespace kolo::python

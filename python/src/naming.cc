// Names of operations, from Python call sites.
#include "binding.h"  // Python.h first: frameobject.h needs it

#include <frameobject.h>

#include <string_view>

#include "kolo/internal/naming.h"

namespace kolo::python {
namespace {

std::string& package_dir() {
  static std::string dir;
  return dir;
}

std::string_view file_of(PyFrameObject* frame) {
  PyCodeObject* code = PyFrame_GetCode(frame);
  Py_ssize_t length = 0;
  const char* text = PyUnicode_AsUTF8AndSize(code->co_filename, &length);
  Py_DECREF(code);  // the frame keeps its code object, and so the file name
  if (text == nullptr) {
    PyErr_Clear();
    return {};
  }
  return {text, static_cast<std::size_t>(length)};
}

}  // namespace

void set_package_dir(std::string dir) { package_dir() = std::move(dir); }

std::string operation_name(const char* op, const std::optional<std::string>& name) {
  if (name) return std::string(op) + "." + *name;
  const std::string& own = package_dir();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr) {
    const std::string_view file = file_of(frame);
    if (own.empty() || !file.starts_with(own)) {
      const std::string site_file(file);
      const int line = PyFrame_GetLineNumber(frame);
      Py_DECREF(frame);
      return auto_name(op, site_file, static_cast<unsigned>(line), 0);
    }
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  // Called with no Python caller outside the package (from a thread's bootstrap).
  return auto_name(op, "<python>", 0, 0);
}

}  // namespace kolo::python

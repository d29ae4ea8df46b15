// Metric averaging over plain doubles: no libtorch needed.
#include "kolo/torch/metrics.h"

namespace kolo::torch {

double average_metric(double value, const std::string& name, Location where) {
  AllreduceOptions options;
  options.op = ReduceOp::Average;
  options.name = name;
  kolo::allreduce(make_tensor(&value, 1), options, where);
  return value;
}

void MetricAverage::update(double value, double count) {
  sum_ += value * count;
  count_ += count;
}

void MetricAverage::reset() {
  sum_ = 0.0;
  count_ = 0.0;
}

double MetricAverage::local() const { return count_ > 0.0 ? sum_ / count_ : 0.0; }

double MetricAverage::global(const std::string& name, Location where) const {
  double totals[2] = {sum_, count_};
  AllreduceOptions options;
  options.op = ReduceOp::Sum;
  options.name = name;
  kolo::allreduce(make_tensor(totals, 2), options, where);
  return totals[1] > 0.0 ? totals[0] / totals[1] : 0.0;
}

}  // namespace kolo::torch

// Averaging scalar metrics (loss, accuracy) across ranks.
#pragma once

#include <string>

#include "kolo/collectives.h"

namespace kolo::torch {

// The mean of `value` over all ranks. Every rank must call it with the same
// `name` (or from the same call site when the name is empty).
double average_metric(double value, const std::string& name = {}, Location where = Location::current());

// A running mean of a metric on this rank (e.g. accuracy over an epoch's batches),
// weighted by counts, whose job-wide mean is one allreduce away.
class MetricAverage {
 public:
  // Adds `value` measured on `count` samples (e.g. a batch's accuracy and its size).
  void update(double value, double count = 1.0);
  void reset();
  // This rank's mean; 0 when nothing was added.
  double local() const;
  // The mean over every rank's samples, weighted by their counts. Collective: every
  // rank must call it.
  double global(const std::string& name = {}, Location where = Location::current()) const;

 private:
  double sum_ = 0.0;
  double count_ = 0.0;
};

}  // namespace kolo::torch

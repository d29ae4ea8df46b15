// kolo: data-parallel collectives for training across processes and hosts.
// Include this one header.
#pragma once

#include "kolo/collectives.h"
#include "kolo/elastic.h"
#include "kolo/error.h"
#include "kolo/handle.h"
#include "kolo/process_set.h"
#include "kolo/runtime.h"
#include "kolo/types.h"

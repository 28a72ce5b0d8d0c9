// The checks that the ranks of a data-parallel job run the same thing (docs/distributed.md), before any data is
// loaded and again once the model is built. Each rank describes itself, the descriptions are gathered over the
// communicator, and a rank that differs from rank 0 is refused, naming the first difference: every rank reaches
// the same verdict, so all stop together. Nothing is checked in a single process.
#pragma once
#include <string>
#include <vector>

#include "engine/comm.h"
#include "models/module.h"
#include "tools/train/run_files.h"

namespace eng::jobs {

// The command line (argument by argument), the binary (/proc/self/exe: size and CRC-32) and each input file
// (size and CRC-32 of its first and last 16 MiB; a directory: its entries' names and sizes).
void check_ranks_agree(Communicator& comm, int argc, char** argv, const std::vector<FlagPath>& inputs);

// The model's parameters, bit for bit (CRC-32 of their bytes): the same seed must give the same initial weights.
void check_same_weights(Communicator& comm, const Module& model);

// `s` from every rank, in rank order.
std::vector<std::string> all_gather_string(Communicator& comm, const std::string& s);

}  // namespace eng::jobs

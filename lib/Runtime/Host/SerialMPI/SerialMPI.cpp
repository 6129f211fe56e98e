//===- SerialMPI.cpp - MPI for one process --------------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "mpi.h"

#include <cstdlib>
#include <cstring>

namespace {
bool initialized = false;
} // namespace

int MPI_Init_thread(int *, char ***, int required, int *provided) {
  initialized = true;
  *provided = required;
  return MPI_SUCCESS;
}

int MPI_Initialized(int *flag) {
  *flag = initialized;
  return MPI_SUCCESS;
}

int MPI_Finalize() {
  initialized = false;
  return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm, int code) { std::exit(code); }

int MPI_Comm_rank(MPI_Comm, int *rank) {
  *rank = 0;
  return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm, int *size) {
  *size = 1;
  return MPI_SUCCESS;
}

int MPI_Comm_split(MPI_Comm, int, int, MPI_Comm *out) {
  *out = MPI_COMM_WORLD;
  return MPI_SUCCESS;
}

int MPI_Comm_split_type(MPI_Comm, int, int, MPI_Info, MPI_Comm *out) {
  *out = MPI_COMM_WORLD;
  return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm *comm) {
  *comm = MPI_COMM_NULL;
  return MPI_SUCCESS;
}

int MPI_Barrier(MPI_Comm) { return MPI_SUCCESS; }

int MPI_Bcast(void *, int, MPI_Datatype, int, MPI_Comm) { return MPI_SUCCESS; }

int MPI_Allreduce(const void *send, void *recv, int count, MPI_Datatype type,
                  MPI_Op, MPI_Comm) {
  // Over one rank every reduction is the rank's own value.
  if (send != recv)
    std::memcpy(recv, send, size_t(count) * size_t(type));
  return MPI_SUCCESS;
}

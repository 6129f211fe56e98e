//===- mpi.h - MPI for one process, without an MPI library ------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The subset of MPI the host runtime calls outside its MPI collectives, for
// a world of one process: what a program built with `fsdp-compile --target
// cuda --no-mpi` runs on, so that a single GPU needs neither an MPI library
// nor mpirun (as PETSc's MPIUNI does). Communicators are the world; a
// broadcast or a reduction over one rank leaves or copies the data.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_HOST_SERIALMPI_MPI_H
#define FSDP_LIB_RUNTIME_HOST_SERIALMPI_MPI_H

#include <cstdint>

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;
typedef int MPI_Info;

constexpr MPI_Comm MPI_COMM_NULL = 0, MPI_COMM_WORLD = 1;
constexpr MPI_Info MPI_INFO_NULL = 0;
constexpr int MPI_COMM_TYPE_SHARED = 1, MPI_THREAD_SINGLE = 0,
              MPI_THREAD_MULTIPLE = 3, MPI_SUCCESS = 0;

// Datatypes are their sizes in bytes, which is all a copy needs.
constexpr MPI_Datatype MPI_BYTE = 1, MPI_INT = int(sizeof(int)), MPI_FLOAT = 4,
                       MPI_INT32_T = 4, MPI_INT64_T = 8, MPI_DOUBLE = 8;

constexpr MPI_Op MPI_SUM = 1, MPI_MAX = 2, MPI_MIN = 3;

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Initialized(int *flag);
int MPI_Finalize();
int MPI_Abort(MPI_Comm comm, int code);
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out);
int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info,
                        MPI_Comm *out);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *data, int count, MPI_Datatype type, int root,
              MPI_Comm comm);
int MPI_Allreduce(const void *send, void *recv, int count, MPI_Datatype type,
                  MPI_Op op, MPI_Comm comm);

#endif // FSDP_LIB_RUNTIME_HOST_SERIALMPI_MPI_H

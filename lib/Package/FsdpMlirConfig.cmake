# find_package(FsdpMlir): the target FsdpMlir::FsdpMlir (libFsdpMlir.so, its
# headers and MLIR's). MLIR 22 must be findable too (MLIR_DIR, or
# CMAKE_PREFIX_PATH=/usr/lib/llvm-22).
include(CMakeFindDependencyMacro)
find_dependency(MLIR CONFIG)
include("${CMAKE_CURRENT_LIST_DIR}/FsdpMlirTargets.cmake")
set_property(TARGET FsdpMlir::FsdpMlir APPEND PROPERTY
  INTERFACE_INCLUDE_DIRECTORIES ${MLIR_INCLUDE_DIRS} ${LLVM_INCLUDE_DIRS})

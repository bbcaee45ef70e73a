# What differs between MPI implementations, for the build and the tests' launch lines: Open MPI
# against the MPICH family (MPICH, Cray MPICH, MVAPICH, Intel MPI), whose launcher is Hydra or
# derived from it. Included from the top-level CMakeLists.txt once MPI is found.
include(CheckSymbolExists)

# ACX_MPI_FLAVOR: openmpi, mpich or other, from the launcher the tests use (its --version).
set(ACX_MPI_FLAVOR other)
if(MPIEXEC_EXECUTABLE)
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _acx_mpiexec_v
                  ERROR_VARIABLE _acx_mpiexec_v TIMEOUT 30)
  if(_acx_mpiexec_v MATCHES "Open MPI|OpenRTE")
    set(ACX_MPI_FLAVOR openmpi)
  elseif(_acx_mpiexec_v MATCHES "HYDRA|MPICH|Intel\\(R\\) MPI")
    set(ACX_MPI_FLAVOR mpich)
  endif()
endif()

# Launch flags the tests put on their mpiexec lines, empty where the launcher needs none.
#   ACX_MPIEXEC_OVERSUBSCRIBE  more ranks than cores (CI has 2 cores, tests run 4 ranks).
#                              Hydra places any number of ranks on a host by default.
#   ACX_MPIEXEC_RECOVERY       the job keeps running when a rank dies (the kill tests).
if(ACX_MPI_FLAVOR STREQUAL "openmpi")
  set(ACX_MPIEXEC_OVERSUBSCRIBE --oversubscribe)
  set(ACX_MPIEXEC_RECOVERY --enable-recovery)
elseif(ACX_MPI_FLAVOR STREQUAL "mpich")
  set(ACX_MPIEXEC_OVERSUBSCRIBE "")
  set(ACX_MPIEXEC_RECOVERY -disable-auto-cleanup)
else()
  set(ACX_MPIEXEC_OVERSUBSCRIBE "")
  set(ACX_MPIEXEC_RECOVERY "")
endif()
message(STATUS "acx: MPI launcher ${MPIEXEC_EXECUTABLE} (${ACX_MPI_FLAVOR})")

# acx_mpiexec_forward(<out> <VAR>...): the flags that hand these environment variables to every
# rank: Open MPI forwards what -x names; Hydra forwards the whole environment unless told
# otherwise, and -genvlist names them explicitly for launchers configured not to.
function(acx_mpiexec_forward out)
  set(_flags)
  if(ACX_MPI_FLAVOR STREQUAL "openmpi")
    foreach(_v ${ARGN})
      list(APPEND _flags -x ${_v})
    endforeach()
  elseif(ACX_MPI_FLAVOR STREQUAL "mpich" AND ARGN)
    string(REPLACE ";" "," _list "${ARGN}")
    set(_flags -genvlist ${_list})
  endif()
  set(${out} ${_flags} PARENT_SCOPE)
endfunction()

# MPICH defines MPI_STATUSES_IGNORE as (MPI_Status *)1 and declares the status arguments as
# arrays, so GCC >= 11 reads MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE) as writing n
# statuses into a region of size 0 (-Wstringop-overflow, an error under -Werror). MPICH keeps the
# definition (pmodels/mpich#5687). The Open MPI build keeps the warning for acx's own code.
macro(acx_mpi_warnings)
  set(CMAKE_REQUIRED_INCLUDES ${MPI_C_INCLUDE_DIRS})
  check_symbol_exists(MPICH_VERSION mpi.h ACX_MPI_IS_MPICH)
  unset(CMAKE_REQUIRED_INCLUDES)
  if(ACX_MPI_IS_MPICH AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
    add_compile_options($<$<COMPILE_LANGUAGE:C>:-Wno-stringop-overflow>)
  endif()
endmacro()

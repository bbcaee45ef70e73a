# The CUDA architectures acx's kernels are compiled for, decided before enable_language(CUDA):
#   1. a value the user set wins: -DCMAKE_CUDA_ARCHITECTURES=... (any CMake form: 80-real, native,
#      all-major...) or the CUDAARCHS environment variable;
#   2. else the GPUs of this machine (nvidia-smi), each as real code, the newest also as PTX so a
#      later GPU can JIT it;
#   3. else every major architecture this nvcc supports (nvcc --list-gpu-arch): sm_X0 code runs on
#      every X.y GPU, and the newest also as PTX. Not CMake's all-major: CMake 3.25's table predates
#      CUDA 13, which dropped every architecture before Turing.
# acx_cuda_architectures() sets CMAKE_CUDA_ARCHITECTURES (cache) and ACX_CUDA_ARCH_SOURCE, a few
# words on where the choice came from, for the configure summary. Needs CMAKE_CUDA_COMPILER.

# <out> := the compute capabilities ("90") of this machine's GPUs, or empty (no GPU, no driver,
# or a driver too old for the compute_cap query).
function(acx_cuda_present_archs out)
  set(_archs)
  execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _caps ERROR_QUIET TIMEOUT 30)
  if(_rc EQUAL 0)
    string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _caps "${_caps}")
    foreach(_c ${_caps})
      string(REPLACE "." "" _c ${_c})
      list(APPEND _archs ${_c})
    endforeach()
    list(REMOVE_DUPLICATES _archs)
  endif()
  set(${out} ${_archs} PARENT_SCOPE)
endfunction()

# <out> := the virtual architectures nvcc compiles for ("75;80;86;..."), ascending, or empty.
function(acx_cuda_toolkit_archs out)
  set(_archs)
  execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _list ERROR_QUIET TIMEOUT 60)
  if(_rc EQUAL 0)
    string(REGEX MATCHALL "compute_[0-9]+\n" _list "${_list}\n")
    foreach(_a ${_list})
      string(REGEX REPLACE "compute_([0-9]+)\n" "\\1" _a "${_a}")
      list(APPEND _archs ${_a})
    endforeach()
    list(SORT _archs COMPARE NATURAL)
  endif()
  set(${out} ${_archs} PARENT_SCOPE)
endfunction()

# <out> := the list for CMAKE_CUDA_ARCHITECTURES: each of `archs` as real code, the last (the
# newest; `archs` ascending) also as PTX.
function(acx_cuda_arch_list out)
  set(_list)
  list(POP_BACK ARGN _newest)
  foreach(_a ${ARGN})
    list(APPEND _list ${_a}-real)
  endforeach()
  list(APPEND _list ${_newest})
  set(${out} ${_list} PARENT_SCOPE)
endfunction()

function(acx_cuda_architectures)
  if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "${ACX_CUDA_ARCH_AUTO}")
    set(ACX_CUDA_ARCH_SOURCE "set by the user" PARENT_SCOPE)
    return()
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND DEFINED ENV{CUDAARCHS})
    set(ACX_CUDA_ARCH_SOURCE "from the CUDAARCHS environment variable" PARENT_SCOPE)
    return()
  endif()
  acx_cuda_toolkit_archs(_supported)
  if(NOT _supported)
    unset(ACX_CUDA_ARCH_AUTO CACHE)
    set(ACX_CUDA_ARCH_SOURCE "nvcc's default: nvcc --list-gpu-arch gave nothing" PARENT_SCOPE)
    return()
  endif()

  # The GPUs present, each mapped to the newest supported architecture it runs: the same major,
  # a minor no higher than its own (binary compatibility within a major).
  acx_cuda_present_archs(_present)
  set(_chosen)
  set(_unsupported)
  foreach(_cc ${_present})
    math(EXPR _major "${_cc} / 10")
    set(_best)
    foreach(_a ${_supported})
      math(EXPR _a_major "${_a} / 10")
      if(_a_major EQUAL _major AND _a LESS_EQUAL _cc)
        set(_best ${_a})
      endif()
    endforeach()
    if(_best)
      list(APPEND _chosen ${_best})
    else()
      list(APPEND _unsupported ${_cc})
    endif()
  endforeach()
  if(_unsupported)
    string(REGEX REPLACE "([0-9]+)([0-9])" "\\1.\\2" _u "${_unsupported}")
    message(WARNING "acx: this machine has GPUs of compute capability ${_u}, which "
                    "${CMAKE_CUDA_COMPILER} does not support: acx cannot run on them")
  endif()

  if(_chosen)
    list(REMOVE_DUPLICATES _chosen)
    list(SORT _chosen COMPARE NATURAL)
    acx_cuda_arch_list(_archs ${_chosen})
    string(REGEX REPLACE "([0-9]+)([0-9])" "\\1.\\2" _p "${_present}")
    string(REPLACE ";" ", " _p "${_p}")
    set(_source "the GPUs of this machine: compute capability ${_p} (nvidia-smi)")
  else()
    # One per major: its lowest minor runs on every GPU of that major.
    set(_majors_seen)
    set(_per_major)
    foreach(_a ${_supported})
      math(EXPR _major "${_a} / 10")
      if(NOT _major IN_LIST _majors_seen)
        list(APPEND _majors_seen ${_major})
        list(APPEND _per_major ${_a})
      endif()
    endforeach()
    acx_cuda_arch_list(_archs ${_per_major})
    set(_source "no GPU that it supports found by nvidia-smi: every major architecture ${CMAKE_CUDA_COMPILER} supports")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${_archs}" CACHE STRING "CUDA architectures (default: the GPUs present, else all)" FORCE)
  set(ACX_CUDA_ARCH_AUTO "${_archs}" CACHE INTERNAL "The CUDA architectures acx chose itself")
  set(ACX_CUDA_ARCH_SOURCE "${_source}" PARENT_SCOPE)
endfunction()

# FindCUTENSOR: locate cuTENSOR 2.x headers and library.
# Hints: CUTENSOR_HOME / CUTENSOR_ROOT (CMake or environment variable), the CUDA toolkit, then the
# distribution's paths (libcutensor2 packages: /usr/include, /usr/lib/x86_64-linux-gnu/libcutensor
# /<cuda major>). Defines CUTENSOR_FOUND, CUTENSOR_INCLUDE_DIRS, CUTENSOR_LIBRARIES,
# CUTENSOR_VERSION and the target CUTENSOR::cutensor. Only cuTENSOR 2 (the API acx uses) counts.
set(_cutensor_hints ${CUTENSOR_HOME} $ENV{CUTENSOR_HOME} ${CUTENSOR_ROOT} $ENV{CUTENSOR_ROOT}
    ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(CUTENSOR_INCLUDE_DIR cutensor.h
  HINTS ${_cutensor_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include include/x86_64-linux-gnu
  PATHS /usr/include/x86_64-linux-gnu /usr/include)
set(_cutensor_sub)
if(CUDAToolkit_VERSION_MAJOR)
  set(_cutensor_sub lib/${CUDAToolkit_VERSION_MAJOR} lib/x86_64-linux-gnu/libcutensor/${CUDAToolkit_VERSION_MAJOR})
endif()
find_library(CUTENSOR_LIBRARY NAMES cutensor libcutensor.so.2
  HINTS ${_cutensor_hints}
  PATH_SUFFIXES ${_cutensor_sub} lib64 lib lib/x86_64-linux-gnu
  PATHS /usr/lib/x86_64-linux-gnu)
if(CUTENSOR_INCLUDE_DIR AND EXISTS "${CUTENSOR_INCLUDE_DIR}/cutensor/types.h")
  file(STRINGS "${CUTENSOR_INCLUDE_DIR}/cutensor.h" _cutensor_ver REGEX "^#define CUTENSOR_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_p MAJOR MINOR PATCH)
    string(REGEX MATCH "CUTENSOR_${_p} +([0-9]+)" _m "${_cutensor_ver}")
    set(CUTENSOR_VERSION_${_p} ${CMAKE_MATCH_1})
  endforeach()
  set(CUTENSOR_VERSION "${CUTENSOR_VERSION_MAJOR}.${CUTENSOR_VERSION_MINOR}.${CUTENSOR_VERSION_PATCH}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUTENSOR REQUIRED_VARS CUTENSOR_LIBRARY CUTENSOR_INCLUDE_DIR
                                  VERSION_VAR CUTENSOR_VERSION)
if(CUTENSOR_FOUND AND CUTENSOR_VERSION_MAJOR AND CUTENSOR_VERSION_MAJOR LESS 2)
  message(STATUS "acx: cuTENSOR ${CUTENSOR_VERSION} found, but acx needs the 2.x API")
  set(CUTENSOR_FOUND FALSE)
endif()
if(CUTENSOR_FOUND)
  set(CUTENSOR_INCLUDE_DIRS ${CUTENSOR_INCLUDE_DIR})
  set(CUTENSOR_LIBRARIES ${CUTENSOR_LIBRARY})
  if(NOT TARGET CUTENSOR::cutensor)
    add_library(CUTENSOR::cutensor UNKNOWN IMPORTED)
    set_target_properties(CUTENSOR::cutensor PROPERTIES IMPORTED_LOCATION "${CUTENSOR_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${CUTENSOR_INCLUDE_DIR}")
  endif()
endif()
mark_as_advanced(CUTENSOR_INCLUDE_DIR CUTENSOR_LIBRARY)

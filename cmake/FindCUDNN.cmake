# FindCUDNN: locate cuDNN (8 or 9) headers and library.
# Hints: CUDNN_HOME (CMake or environment variable), the CUDA toolkit, then the distribution's
# paths (Debian/Ubuntu packages put cudnn.h in /usr/include/x86_64-linux-gnu and libcudnn.so.9 in
# /usr/lib/x86_64-linux-gnu). Defines CUDNN_FOUND, CUDNN_INCLUDE_DIRS, CUDNN_LIBRARIES,
# CUDNN_VERSION and the target CUDNN::cudnn.
set(_cudnn_hints ${CUDNN_HOME} $ENV{CUDNN_HOME} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include include/x86_64-linux-gnu
  PATHS /usr/include/x86_64-linux-gnu /usr/include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 libcudnn.so.8
  HINTS ${_cudnn_hints}
  PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu
  PATHS /usr/lib/x86_64-linux-gnu)
if(CUDNN_INCLUDE_DIR)
  # cuDNN 8+ keeps the version in cudnn_version.h; older releases in cudnn.h.
  set(_cudnn_vh "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  if(NOT EXISTS "${_cudnn_vh}")
    set(_cudnn_vh "${CUDNN_INCLUDE_DIR}/cudnn.h")
  endif()
  file(STRINGS "${_cudnn_vh}" _cudnn_ver REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
  foreach(_p MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${_p} +([0-9]+)" _m "${_cudnn_ver}")
    set(CUDNN_VERSION_${_p} ${CMAKE_MATCH_1})
  endforeach()
  set(CUDNN_VERSION "${CUDNN_VERSION_MAJOR}.${CUDNN_VERSION_MINOR}.${CUDNN_VERSION_PATCHLEVEL}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND)
  set(CUDNN_INCLUDE_DIRS ${CUDNN_INCLUDE_DIR})
  set(CUDNN_LIBRARIES ${CUDNN_LIBRARY})
  if(NOT TARGET CUDNN::cudnn)
    add_library(CUDNN::cudnn UNKNOWN IMPORTED)
    set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
  endif()
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)

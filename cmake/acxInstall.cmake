# Install layout and the package files consumers use: headers, libacx, acx-executor, the
# benchmarks, the exported target acx::acx (acxConfig.cmake) and acx.pc. Included last from the
# top-level CMakeLists.txt so every target it installs already exists.
include(CMakePackageConfigHelpers)

set(ACX_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/acx CACHE STRING
    "Where acxConfig.cmake is installed, relative to the prefix")

# libacx links acx_deps PRIVATE (its own DT_NEEDED entries); consumers only need what the
# public headers pull in. Threads: the API is thread-safe and users create threads around it.
# MPI: the world API takes an MPI_Comm, so its headers need mpi.h.
target_link_libraries(acx INTERFACE Threads::Threads)
if(ACX_HAVE_MPI)
  target_link_libraries(acx INTERFACE MPI::MPI_C)
endif()

# Installed binaries find libacx through $ORIGIN and keep the directories of external
# libraries (CUDA under /usr/local/cuda, Open MPI's private libdir) that ld.so may not know.
file(RELATIVE_PATH _acx_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
set(_acx_install_exes)
foreach(_t acx-info acx-executor)
  if(TARGET ${_t})
    list(APPEND _acx_install_exes ${_t})
  endif()
endforeach()
# Benchmarks: every executable target defined under bench/, whatever its name.
function(acx_collect_executables dir out)
  get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  set(_found)
  foreach(_t ${_targets})
    get_target_property(_type ${_t} TYPE)
    if(_type STREQUAL "EXECUTABLE")
      list(APPEND _found ${_t})
    endif()
  endforeach()
  get_property(_subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(_d ${_subdirs})
    acx_collect_executables(${_d} _sub)
    list(APPEND _found ${_sub})
  endforeach()
  set(${out} ${_found} PARENT_SCOPE)
endfunction()
set(_acx_bench_exes)
if(ACX_BUILD_BENCH AND IS_DIRECTORY ${PROJECT_SOURCE_DIR}/bench)
  acx_collect_executables(${PROJECT_SOURCE_DIR}/bench _acx_bench_exes)
endif()

set_target_properties(acx acx_exec PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
foreach(_t ${_acx_install_exes} ${_acx_bench_exes})
  set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN/${_acx_bin_to_lib}"
                                         INSTALL_RPATH_USE_LINK_PATH TRUE)
endforeach()

install(TARGETS acx EXPORT acxTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The executor library beside libacx, where the inline transport looks for it.
install(TARGETS acx_exec LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# acx-info installs itself (tools/CMakeLists.txt); the executor sits in bindir, where the
# DeviceActor looks when it is not next to libacx (ACX_INSTALL_BINDIR).
if(TARGET acx-executor)
  install(TARGETS acx-executor RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
if(_acx_bench_exes)
  install(TARGETS ${_acx_bench_exes} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# Fortran: libacx_fortran in the export set (acx::acx_fortran) and its compiler-specific .mod
# files in include/acx/fortran, the module path the target carries.
if(TARGET acx_fortran)
  # $ORIGIN: libacx sits beside it, and a RUNPATH only serves the object that carries it.
  set_target_properties(acx_fortran PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH TRUE)
  install(TARGETS acx_fortran EXPORT acxTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  get_target_property(_acx_fortran_moddir acx_fortran Fortran_MODULE_DIRECTORY)
  install(DIRECTORY ${_acx_fortran_moddir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/acx/fortran
          FILES_MATCHING PATTERN "*.mod")
endif()

file(GLOB _acx_public_headers ${PROJECT_SOURCE_DIR}/include/acx/*.h)
install(FILES ${_acx_public_headers} ${PROJECT_BINARY_DIR}/include/acx/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/acx)

# CMake package: acx::acx plus the dependencies this libacx was built with.
install(EXPORT acxTargets NAMESPACE acx:: DESTINATION ${ACX_INSTALL_CMAKEDIR}
        FILE acxTargets.cmake)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/acxConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/acxConfig.cmake INSTALL_DESTINATION ${ACX_INSTALL_CMAKEDIR})
# Before 1.0 a minor release may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/acxConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/acxConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/acxConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/acxFindPkg.cmake
        DESTINATION ${ACX_INSTALL_CMAKEDIR})

# pkg-config: relocatable (prefix from ${pcfiledir}), because CI installs with --prefix into a
# temporary directory after configuring for the default prefix.
file(RELATIVE_PATH ACX_PC_PREFIX_FROM_PCDIR ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" ACX_PC_PREFIX_FROM_PCDIR "${ACX_PC_PREFIX_FROM_PCDIR}")
set(ACX_PC_CFLAGS "")
set(ACX_PC_LIBS "")
if(ACX_HAVE_MPI)
  foreach(_d ${MPI_C_INCLUDE_DIRS})
    string(APPEND ACX_PC_CFLAGS " -I${_d}")
  endforeach()
  foreach(_l ${MPI_C_LIBRARIES})
    string(APPEND ACX_PC_LIBS " ${_l}")
  endforeach()
endif()
set(ACX_PC_LIBS_PRIVATE "-pthread")
foreach(_l ${CMAKE_DL_LIBS} rt m)
  string(APPEND ACX_PC_LIBS_PRIVATE " -l${_l}")
endforeach()
set(ACX_PC_REQUIRES_PRIVATE "")
if(PKG_CONFIG_FOUND AND HWLOC_MODULE_NAME)
  set(ACX_PC_REQUIRES_PRIVATE "hwloc")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/acx.pc.in ${PROJECT_BINARY_DIR}/acx.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/acx.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Lmod modulefile: <prefix>/share/modulefiles/acx/<version>.lua, relocatable (it finds the prefix
# from its own path: ACX_MODULEFILE_DEPTH components up), or in a site's module tree given as an
# absolute ACX_INSTALL_MODULEFILEDIR (then it names the install prefix).
set(ACX_INSTALL_MODULEFILEDIR ${CMAKE_INSTALL_DATADIR}/modulefiles/acx CACHE STRING
    "Where the Lmod modulefile acx/<version>.lua is installed (relative: to the prefix)")
set(ACX_MODULE_FIXED_PREFIX "")
set(ACX_MODULEFILE_DEPTH 0)
if(IS_ABSOLUTE "${ACX_INSTALL_MODULEFILEDIR}")
  set(ACX_MODULE_FIXED_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  string(REPLACE "/" ";" _acx_moddir_parts "${ACX_INSTALL_MODULEFILEDIR}")
  list(LENGTH _acx_moddir_parts ACX_MODULEFILE_DEPTH)
  math(EXPR ACX_MODULEFILE_DEPTH "${ACX_MODULEFILE_DEPTH} + 1") # and the file itself
endif()
set(ACX_MODULE_MPI "none")
if(ACX_HAVE_MPI)
  set(ACX_MODULE_MPI "${MPI_C_COMPILER} (${ACX_MPI_FLAVOR}, MPI ${MPI_C_VERSION})")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/acx.lua.in ${PROJECT_BINARY_DIR}/modulefiles/${PROJECT_VERSION}.lua @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/modulefiles/${PROJECT_VERSION}.lua DESTINATION ${ACX_INSTALL_MODULEFILEDIR})

# The examples' sources (docs/getting-started.md, docs/resilience.md, docs/fortran.md point to
# them): built against the installed acx like any user program, e.g.
#   mpicc resilient_allreduce.c $(pkg-config --cflags --libs acx)
install(FILES ${PROJECT_SOURCE_DIR}/examples/resilient_allreduce.c
        DESTINATION ${CMAKE_INSTALL_DATADIR}/acx/examples)
install(FILES ${PROJECT_SOURCE_DIR}/examples/fortran/heat1d.f90
        DESTINATION ${CMAKE_INSTALL_DATADIR}/acx/examples/fortran)

# Builds and runs the consumer project against troupe, through
# add_subdirectory, or through find_package or pkg-config on a freshly
# installed tree.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(launcher)
find_program(CCACHE ccache)
if(CCACHE)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE})
endif()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE r OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT r EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

if(MODE STREQUAL "find_package" OR MODE STREQUAL "pkg-config")
  run(${CMAKE_COMMAND} -S "${TROUPE_SOURCE}" -B "${WORK}/troupe-build"
      -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_EXAMPLES=OFF -DTROUPE_BUILD_BENCH=OFF
      -DCMAKE_INSTALL_PREFIX=${WORK}/prefix)
  run(${CMAKE_COMMAND} --install "${WORK}/troupe-build")
endif()
if(MODE STREQUAL "pkg-config")
  # The compiler and the flags pkg-config gives, nothing else.
  find_program(PKG_CONFIG pkg-config REQUIRED)
  file(GLOB_RECURSE _pc "${WORK}/prefix/*/troupe.pc")
  list(GET _pc 0 _pc)
  get_filename_component(_pc_dir "${_pc}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${_pc_dir}")
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs troupe OUTPUT_VARIABLE flags RESULT_VARIABLE r
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT r EQUAL 0)
    message(FATAL_ERROR "pkg-config does not know troupe (looked in ${_pc_dir})")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  file(MAKE_DIRECTORY "${WORK}/build")
  run(${COMPILER} "${CONSUMER}/main.cpp" ${flags} -o "${WORK}/build/consumer")
  run("${WORK}/build/consumer")
  # The layers on RocksDB: their .pc resolves (through rocksdb.pc) where
  # their headers were installed.
  if(EXISTS "${WORK}/prefix/include/troupe/rocksdb/store.hpp")
    run(${PKG_CONFIG} --cflags --libs troupe-rocksdb)
  endif()
  message(STATUS "consumer built and ran (pkg-config: ${flags})")
  return()
endif()
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S "${CONSUMER}" -B "${WORK}/build" -DCMAKE_PREFIX_PATH=${WORK}/prefix ${launcher})
else()
  run(${CMAKE_COMMAND} -S "${CONSUMER}" -B "${WORK}/build" -DTROUPE_SOURCE_DIR=${TROUPE_SOURCE} ${launcher})
endif()
run(${CMAKE_COMMAND} --build "${WORK}/build")
run("${WORK}/build/consumer")
message(STATUS "consumer built and ran (${MODE})")

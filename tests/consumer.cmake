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

# The persistent counter, header-only then separately compiled, on one
# store: the second goes on from the first's count.
function(check_counters)
  file(REMOVE_RECURSE "${WORK}/counter-store")
  foreach(_exe counter_header_only counter_compiled)
    execute_process(COMMAND "${WORK}/build/${_exe}" "${WORK}/counter-store" 3
      RESULT_VARIABLE r OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT r EQUAL 0)
      message(FATAL_ERROR "${_exe} failed (${r}):\n${out}\n${err}")
    endif()
    list(APPEND _finals "${out}")
  endforeach()
  if(NOT _finals MATCHES "final 3\n.*final 6\n")
    message(FATAL_ERROR "the counters do not go on from each other:\n${_finals}")
  endif()
endfunction()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE r OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT r EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

# MODE=install: builds troupe and installs it into ${WORK}/prefix, once,
# for the find_package and pkg-config tests (their PREFIX).
if(MODE STREQUAL "install")
  run(${CMAKE_COMMAND} -S "${TROUPE_SOURCE}" -B "${WORK}/troupe-build"
      -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_EXAMPLES=OFF -DTROUPE_BUILD_BENCH=OFF
      -DCMAKE_INSTALL_PREFIX=${WORK}/prefix ${launcher})
  run(${CMAKE_COMMAND} --build "${WORK}/troupe-build" -j2)
  run(${CMAKE_COMMAND} --install "${WORK}/troupe-build")
  message(STATUS "troupe installed into ${WORK}/prefix")
  return()
endif()
if(MODE STREQUAL "find_package" OR MODE STREQUAL "pkg-config")
  if(NOT EXISTS "${PREFIX}/include/troupe/troupe.hpp")
    message(FATAL_ERROR "no troupe installed in ${PREFIX} (the test core/consumer_installs_troupe sets it up)")
  endif()
endif()
if(MODE STREQUAL "pkg-config")
  # The compiler and the flags pkg-config gives, nothing else.
  find_program(PKG_CONFIG pkg-config REQUIRED)
  file(GLOB_RECURSE _pc "${PREFIX}/*/troupe.pc")
  list(GET _pc 0 _pc)
  get_filename_component(_pc_dir "${_pc}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${_pc_dir}")
  file(MAKE_DIRECTORY "${WORK}/build")
  # Compiles `source` into `name` with the flags of package `pc`.
  function(build_with pc source name)
    execute_process(COMMAND ${PKG_CONFIG} --cflags --libs ${pc} OUTPUT_VARIABLE flags RESULT_VARIABLE r
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT r EQUAL 0)
      message(FATAL_ERROR "pkg-config does not know ${pc} (looked in ${_pc_dir})")
    endif()
    separate_arguments(flags UNIX_COMMAND "${flags}")
    run(${COMPILER} "${source}" ${flags} -o "${WORK}/build/${name}")
    message(STATUS "${name}: ${flags}")
  endfunction()
  build_with(troupe "${CONSUMER}/main.cpp" consumer)
  build_with(troupe-compiled "${CONSUMER}/main.cpp" consumer_compiled)
  run("${WORK}/build/consumer")
  run("${WORK}/build/consumer_compiled")
  # The layers on RocksDB, both ways, on one store.
  if(EXISTS "${PREFIX}/include/troupe/rocksdb/store.hpp")
    build_with(troupe-rocksdb "${COUNTER_SOURCE}" counter_header_only)
    build_with(troupe-rocksdb-compiled "${COUNTER_SOURCE}" counter_compiled)
    check_counters()
  endif()
  if(EXISTS "${PREFIX}/include/troupe/postgres/store.hpp")
    run(${PKG_CONFIG} --cflags --libs troupe-postgres troupe-postgres-compiled)
  endif()
  message(STATUS "consumer built and ran (pkg-config)")
  return()
endif()
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S "${CONSUMER}" -B "${WORK}/build" -DCMAKE_PREFIX_PATH=${PREFIX}
      -DCOUNTER_SOURCE=${COUNTER_SOURCE} ${launcher})
else()
  # Here the compiled twins also compile Asio's sources (TROUPE_COMPILED_ASIO).
  run(${CMAKE_COMMAND} -S "${CONSUMER}" -B "${WORK}/build" -DTROUPE_SOURCE_DIR=${TROUPE_SOURCE}
      -DCOUNTER_SOURCE=${COUNTER_SOURCE} -DTROUPE_COMPILED_ASIO=ON ${launcher})
endif()
run(${CMAKE_COMMAND} --build "${WORK}/build" -j2)
run("${WORK}/build/consumer")
run("${WORK}/build/consumer_compiled")
if(EXISTS "${WORK}/build/counter_compiled")
  check_counters()
elseif(NOT NO_ROCKSDB)
  message(FATAL_ERROR "the counters were not built (RocksDB not found by the consumer?)")
endif()
message(STATUS "consumer built and ran (${MODE})")

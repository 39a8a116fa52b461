# Builds and runs the consumer project against troupe, either through
# add_subdirectory or through find_package on a freshly installed tree.
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

if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S "${TROUPE_SOURCE}" -B "${WORK}/troupe-build"
      -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_EXAMPLES=OFF -DTROUPE_BUILD_BENCH=OFF
      -DCMAKE_INSTALL_PREFIX=${WORK}/prefix)
  run(${CMAKE_COMMAND} --install "${WORK}/troupe-build")
  run(${CMAKE_COMMAND} -S "${CONSUMER}" -B "${WORK}/build" -DCMAKE_PREFIX_PATH=${WORK}/prefix ${launcher})
else()
  run(${CMAKE_COMMAND} -S "${CONSUMER}" -B "${WORK}/build" -DTROUPE_SOURCE_DIR=${TROUPE_SOURCE} ${launcher})
endif()
run(${CMAKE_COMMAND} --build "${WORK}/build")
run("${WORK}/build/consumer")
message(STATUS "consumer built and ran (${MODE})")

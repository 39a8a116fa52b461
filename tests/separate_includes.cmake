# With TROUPE_SEPARATE_COMPILATION a file that includes an engine's store
# parses none of the engine's library headers (RocksDB's, libpq's), and a
# file of the core none of Boost's: lists what each includes (-H) and fails
# on any. Run with -DCOMPILER=... -DSOURCE=<source dir> -DWORK=<dir>.
file(MAKE_DIRECTORY "${WORK}")
set(cases
  "core|<troupe/troupe.hpp>|include/boost/,include/rocksdb/,libpq-fe[.]h"
  "rocksdb|<troupe/rocksdb/store.hpp>,<troupe/persistence/persistent_actor.hpp>|include/rocksdb/,libpq-fe[.]h"
  "postgres|<troupe/postgres/store.hpp>,<troupe/persistence/persistent_actor.hpp>|include/rocksdb/,libpq-fe[.]h")
foreach(case IN LISTS cases)
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 name)
  list(GET parts 1 headers)
  list(GET parts 2 forbidden)
  string(REPLACE "," ";" headers "${headers}")
  string(REPLACE "," ";" forbidden "${forbidden}")
  set(text "")
  foreach(h IN LISTS headers)
    string(APPEND text "#include ${h}\n")
  endforeach()
  string(APPEND text "int main() {}\n")
  file(WRITE "${WORK}/${name}.cpp" "${text}")
  execute_process(COMMAND ${COMPILER} -std=c++20 -DTROUPE_SEPARATE_COMPILATION -I${SOURCE}/include
                          -fsyntax-only -H "${WORK}/${name}.cpp"
                  RESULT_VARIABLE r ERROR_VARIABLE listed OUTPUT_QUIET)
  if(NOT r EQUAL 0)
    message(FATAL_ERROR "${name}: does not compile:\n${listed}")
  endif()
  string(REGEX MATCHALL "[^\n]+" lines "${listed}")
  list(LENGTH lines n)
  if(n LESS 50)
    message(FATAL_ERROR "${name}: -H listed only ${n} headers:\n${listed}")
  endif()
  foreach(bad IN LISTS forbidden)
    foreach(line IN LISTS lines)
      if(line MATCHES "${bad}")
        message(FATAL_ERROR "${name}: includes ${line}")
      endif()
    endforeach()
  endforeach()
  message(STATUS "${name}: ${n} headers, none of ${forbidden}")
endforeach()

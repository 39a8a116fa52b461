# A restart of the order workflow replays what is under way, not the
# history: ORDERS orders are run to their end, then the program restarts on
# the same store with nothing left to do. The long-lived actors (the
# warehouses, one event per order; the shop) recover from their snapshots,
# so their recoveries replay fewer than LIMIT events, however many orders
# there were.
#   cmake -DPROGRAM=troupe_orders -DDIR=d -DORDERS=n -DLIMIT=k -P restart_replay_check.cmake
file(REMOVE_RECURSE "${DIR}")
foreach(round first restart)
  execute_process(COMMAND "${PROGRAM}" run --orders ${ORDERS} --dir "${DIR}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the ${round} run failed (${rc}): ${out} ${err}")
  endif()
  string(REGEX MATCH "{[^\n]*}[\n]*$" summary "${out}")
  string(JSON ended GET "${summary}" ended)
  string(JSON replayed GET "${summary}" events_replayed_at_start)
  message(STATUS "${round} run: ${ended} orders ended, ${replayed} events replayed by the long-lived actors")
  if(NOT ended EQUAL ORDERS)
    message(FATAL_ERROR "the ${round} run ended ${ended} orders of ${ORDERS}: ${summary}")
  endif()
endforeach()
if(replayed GREATER_EQUAL LIMIT)
  message(FATAL_ERROR "the restart replayed ${replayed} events (limit ${LIMIT}): the long-lived actors replayed "
                      "their history instead of starting from a snapshot")
endif()
file(REMOVE_RECURSE "${DIR}")

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
  string(JSON recovered GET "${summary}" long_lived_recovered)
  string(JSON long_lived GET "${summary}" long_lived)
  message(STATUS "${round} run: ${ended} orders ended, ${recovered} of ${long_lived} long-lived actors recovered, "
                 "replaying ${replayed} events")
  if(NOT ended EQUAL ORDERS)
    message(FATAL_ERROR "the ${round} run ended ${ended} orders of ${ORDERS}: ${summary}")
  endif()
  # A count from fewer than all of them would pass for the wrong reason.
  if(NOT recovered EQUAL long_lived)
    message(FATAL_ERROR "the ${round} run counted the recoveries of ${recovered} of ${long_lived} long-lived actors")
  endif()
endforeach()
# The restart replays at least the shop's windows: a count of nothing is
# no count.
if(replayed LESS 2)
  message(FATAL_ERROR "the restart replayed ${replayed} events: the long-lived actors' recoveries were not counted")
endif()
if(replayed GREATER_EQUAL LIMIT)
  message(FATAL_ERROR "the restart replayed ${replayed} events (limit ${LIMIT}): the long-lived actors replayed "
                      "their history instead of starting from a snapshot")
endif()
file(REMOVE_RECURSE "${DIR}")

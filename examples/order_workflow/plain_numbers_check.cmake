# Runs `troupe_orders run` and checks that its JSON summary line prints
# every number as a plain decimal (0.0967, 516.85), never in exponent
# form (9.6739452E-2) that a reader or a shell script would stumble on.
# -DPROGRAM=<troupe_orders> -DDIR=<scratch directory>
file(REMOVE_RECURSE "${DIR}")
execute_process(COMMAND "${PROGRAM}" run --orders 30 --dir "${DIR}"
                OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "troupe_orders run exited with ${rc}:\n${out}")
endif()
string(REGEX MATCH "{[^\n]*\"orders_per_second\"[^\n]*}" summary "${out}")
if(NOT summary)
  message(FATAL_ERROR "no JSON summary line in:\n${out}")
endif()
if(summary MATCHES "[0-9][eE][-+]?[0-9]")
  message(FATAL_ERROR "a number in exponent form: ${summary}")
endif()
if(NOT summary MATCHES "\"seconds\":[0-9]+(\\.[0-9]+)?[,}]")
  message(FATAL_ERROR "seconds is not a plain decimal: ${summary}")
endif()
message(STATUS "plain numbers: ${summary}")
file(REMOVE_RECURSE "${DIR}")

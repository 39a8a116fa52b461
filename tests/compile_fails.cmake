# Compiles SOURCE and succeeds only if that fails with a diagnostic that
# names each of EXPECT (a list).
set(flags -std=c++20 -fsyntax-only)
foreach(dir ${INCLUDES})
  list(APPEND flags -I${dir})
endforeach()
execute_process(COMMAND ${COMPILER} ${flags} ${SOURCE}
  RESULT_VARIABLE result ERROR_VARIABLE diagnostic OUTPUT_VARIABLE out)
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not")
endif()
foreach(expected ${EXPECT})
  string(FIND "${diagnostic}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the diagnostic does not mention '${expected}':\n${diagnostic}")
  endif()
endforeach()
string(LENGTH "${diagnostic}" length)
message(STATUS "rejected as expected (${length} characters of diagnostic)")

# The layers' include rules (docs/design.md, "Layers"): the core includes no
# layer and no engine; persistence includes nothing above it and no engine;
# delivery and effects include no engine. The old paths of moved headers,
# which only forward, are the exception. Run with -DSOURCE=<source dir>.
set(_root "${SOURCE}/include/troupe")
set(_failures "")

# Appends to _failures every include of `files` (relative to _root) that
# matches one of `forbidden` (regular expressions).
function(check what files forbidden)
  foreach(_f IN LISTS files)
    file(READ "${_root}/${_f}" _text)
    if(_text MATCHES "Forwards to `<troupe/")
      continue()
    endif()
    file(STRINGS "${_root}/${_f}" _includes REGEX "^[ \t]*#[ \t]*include")
    foreach(_line IN LISTS _includes)
      foreach(_bad IN LISTS forbidden)
        if(_line MATCHES "${_bad}")
          list(APPEND _failures "${what}: troupe/${_f}: ${_line}")
        endif()
      endforeach()
    endforeach()
  endforeach()
  set(_failures "${_failures}" PARENT_SCOPE)
endfunction()

set(_engines "<troupe/rocksdb/" "<troupe/postgres/" "<rocksdb/" "<libpq-fe[.]h>" "<postgresql/")

file(GLOB _core RELATIVE "${_root}" "${_root}/*.hpp")
file(GLOB_RECURSE _core_detail RELATIVE "${_root}" "${_root}/detail/*.hpp")
check("the core names a layer or an engine" "${_core};${_core_detail}"
      "<troupe/persistence/;<troupe/delivery/;<troupe/effects/;<troupe/testing/;${_engines}")
file(GLOB_RECURSE _persistence RELATIVE "${_root}" "${_root}/persistence/*.hpp")
check("persistence names a layer above it or an engine" "${_persistence}"
      "<troupe/delivery/;<troupe/effects/;<troupe/testing/;${_engines}")
file(GLOB_RECURSE _delivery RELATIVE "${_root}" "${_root}/delivery/*.hpp")
check("delivery names effects or an engine" "${_delivery}" "<troupe/effects/;<troupe/testing/;${_engines}")
file(GLOB_RECURSE _effects RELATIVE "${_root}" "${_root}/effects/*.hpp")
check("effects names an engine" "${_effects}" "<troupe/testing/;${_engines}")

list(LENGTH _persistence _n)
if(_n LESS 10)
  message(FATAL_ERROR "found only ${_n} persistence headers under ${_root}: wrong SOURCE?")
endif()
if(_failures)
  list(JOIN _failures "\n  " _text)
  message(FATAL_ERROR "layer rules broken:\n  ${_text}")
endif()
message(STATUS "layer rules hold")

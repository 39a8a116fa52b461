# troupe_precompile_headers(<target> [PERSISTENCE] [DELIVERY] [EFFECTS] [ROCKSDB] [POSTGRES])
#
# Gives <target> a precompiled header of troupe's public headers and of what
# they include: the core's always; PERSISTENCE adds persistent actors and
# their JSON, DELIVERY reliable delivery and entities, EFFECTS the outbox
# and the dispatcher, ROCKSDB and POSTGRES an engine's store (each layer
# names the ones below it). Name only the layers the target's files use: a
# larger header costs every file the time to load it (docs/building.md
# has the figures).
#
# The header is built once per target; targets with the same flags may
# share one with `target_precompile_headers(<other> REUSE_FROM <target>)`.
# With ccache as the compiler launcher, ccache caches such files only with
# `sloppiness = pch_defines,time_macros`.
#
# GCC 12 crashes (an internal compiler error in the mangler) on a file that
# uses a precompiled header holding the definition of a coroutine that is
# not a template: the effects layer's dispatcher is one. Separately
# compiled (troupe::*_compiled), its definitions are not in the headers, and
# EFFECTS works; header-only, leave EFFECTS out with GCC 12.
function(troupe_precompile_headers target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "PERSISTENCE;DELIVERY;EFFECTS;ROCKSDB;POSTGRES" "" "")
  set(headers <troupe/troupe.hpp>)
  if(arg_PERSISTENCE OR arg_DELIVERY OR arg_EFFECTS)
    list(APPEND headers <troupe/persistence/persistent_actor.hpp> <troupe/persistence/json.hpp>)
  endif()
  if(arg_DELIVERY OR arg_EFFECTS)
    list(APPEND headers <troupe/delivery/reliable_actor.hpp> <troupe/delivery/entities.hpp>)
  endif()
  if(arg_EFFECTS)
    list(APPEND headers <troupe/effects/effectful_actor.hpp> <troupe/effects/dispatcher.hpp>)
  endif()
  if(arg_ROCKSDB)
    list(APPEND headers <troupe/rocksdb/store.hpp>)
  endif()
  if(arg_POSTGRES)
    list(APPEND headers <troupe/postgres/store.hpp>)
  endif()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()

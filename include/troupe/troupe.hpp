#pragma once

/// \file
/// Everything in troupe's core: actors on Asio executors. Also brings
/// `asio::use_future`, so that a plain thread can wait for an ask:
/// `c.ask(total{}, asio::use_future).get()`.

#include <troupe/actor_ref.hpp>
#include <troupe/actor_system.hpp>
#include <troupe/concepts.hpp>
#include <troupe/config.hpp>
#include <troupe/context.hpp>
#include <troupe/entity.hpp>
#include <troupe/error.hpp>
#include <troupe/gather.hpp>
#include <troupe/hooks.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/protocol.hpp>
#include <troupe/reply_promise.hpp>
#include <troupe/supervision.hpp>
#include <troupe/task.hpp>
#include <troupe/version.hpp>

#include <asio/use_future.hpp>

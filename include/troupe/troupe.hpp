#pragma once

/// \file
/// Everything in troupe's core: actors on Asio executors.

#include <troupe/actor_ref.hpp>
#include <troupe/actor_system.hpp>
#include <troupe/concepts.hpp>
#include <troupe/config.hpp>
#include <troupe/context.hpp>
#include <troupe/error.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/supervision.hpp>
#include <troupe/task.hpp>

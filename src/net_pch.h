// Precompiled header for the network drivers: Asio and Beast dominate compile time.
#pragma once
// fmt 9's core.h (also pulled in by spdlog) compiles itself under `#pragma GCC push_options` +
// `optimize("Og")` + `pop_options` in unoptimised builds. GCC 12 does not restore that state when it
// loads a precompiled header (GCC bug 105120, fmtlib/fmt#4757): every file built with this PCH then
// saw __OPTIMIZE__ at -O0 while src/core/ (no PCH) did not. simdjson keys SIMDJSON_DEVELOPMENT_CHECKS
// (which adds a member to ondemand::parser) on __OPTIMIZE__, so the two halves of a Debug build
// disagreed on the parser's layout, and the linker could pick the smaller destructor for the core's
// parsers: LeakSanitizer saw their 8 KiB depth buffers leak. Defining fmt's pragma hook away keeps the
// optimisation state out of the PCH (checked by tests/gateway/net_pch_test.cpp).
#define FMT_GCC_PRAGMA(arg)
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>
#include <fmt/format.h>

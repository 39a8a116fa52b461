#pragma once

/// \file
/// troupe's version. CMake reads the project's version from here.

#define TROUPE_VERSION_MAJOR 0
#define TROUPE_VERSION_MINOR 2
#define TROUPE_VERSION_PATCH 0
/// `MAJOR * 10000 + MINOR * 100 + PATCH`, for preprocessor comparisons.
#define TROUPE_VERSION (TROUPE_VERSION_MAJOR * 10000 + TROUPE_VERSION_MINOR * 100 + TROUPE_VERSION_PATCH)

namespace troupe {

/// The version as text, "MAJOR.MINOR.PATCH".
inline constexpr const char* version_string = "0.2.0";

} // namespace troupe

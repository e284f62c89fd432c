// What this binary is: `sluice --version` and the sluice_build_info metric. Defined in a file
// CMake generates (cmake/build_info.cmake).
#pragma once
#include <string_view>

namespace sluice {

std::string_view build_version();   // the project's version (CMakeLists.txt)
std::string_view build_revision();  // git revision at configure time, or "unknown"
std::string_view build_type();      // Release, Debug, ...

}  // namespace sluice

# The version and revision `sluice --version` prints and sluice_build_info exports
# (src/core/build_info.h). The revision is read when CMake configures (a clean CI build always
# does); an incremental build after new commits keeps the old one until CMake re-runs.
find_package(Git QUIET)
set(SLUICE_GIT_REVISION "unknown")
if(GIT_FOUND AND EXISTS "${CMAKE_SOURCE_DIR}/.git")
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${CMAKE_SOURCE_DIR} rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE SLUICE_GIT_REVISION OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT SLUICE_GIT_REVISION)
    set(SLUICE_GIT_REVISION "unknown")
  endif()
endif()
set(SLUICE_BUILD_INFO_CPP ${CMAKE_BINARY_DIR}/generated/build_info.cpp)
configure_file(${CMAKE_SOURCE_DIR}/cmake/build_info.cpp.in ${SLUICE_BUILD_INFO_CPP} @ONLY)

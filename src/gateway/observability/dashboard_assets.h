// The live dashboard's static files (web/dist: index.html, app.js, prom.js, style.css and uPlot's
// minified js/css), embedded into the binary at build time by cmake/embed_web.cmake, for the admin
// listener to serve at /dashboard and /dashboard/*. No file is read from disk at run time.
//
//   find_dashboard_asset("/dashboard")           -> index.html
//   find_dashboard_asset("/dashboard/")          -> index.html
//   find_dashboard_asset("/dashboard/app.js?v=1") -> app.js (query and fragment are ignored)
//   anything else (other prefixes, sub-directories, "..", unknown names) -> nullptr (serve 404)
//
// A binary built without web/dist (scripts/build-web.sh not run) embeds a single index.html that
// says how to build the assets; dashboard_assets_built() is then false.
#pragma once
#include <cstddef>
#include <string_view>

namespace sluice {

struct StaticAsset {
  std::string_view content_type;
  std::string_view body;
};

// The asset for a request target path, or nullptr when there is none. Thread-safe; the returned
// pointer and the views it holds live for the whole program.
const StaticAsset* find_dashboard_asset(std::string_view path);

// False when the binary carries only the "run scripts/build-web.sh" placeholder page.
bool dashboard_assets_built();

// The files as the generated source lays them out (used by dashboard_assets.cpp only).
namespace dashboard_embed {
struct EmbeddedFile {
  const char* name;
  const unsigned char* data;
  std::size_t size;
};
extern const EmbeddedFile kFiles[];
extern const std::size_t kFileCount;
extern const bool kBuilt;
}  // namespace dashboard_embed

}  // namespace sluice

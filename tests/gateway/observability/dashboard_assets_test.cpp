// The embedded dashboard assets: path handling, content types, and (when web/dist was built) that
// every file the page references is embedded and nothing is fetched from another origin.
#include "gateway/observability/dashboard_assets.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace sluice {
namespace {

TEST(DashboardAssets, IndexServedAtTheBarePathAndWithSlashAndQuery) {
  const StaticAsset* a = find_dashboard_asset("/dashboard");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->content_type, "text/html; charset=utf-8");
  EXPECT_NE(a->body.find("<html"), std::string_view::npos);
  EXPECT_EQ(find_dashboard_asset("/dashboard/"), a);
  EXPECT_EQ(find_dashboard_asset("/dashboard/index.html"), a);
  EXPECT_EQ(find_dashboard_asset("/dashboard?pool=chat"), a);
  EXPECT_EQ(find_dashboard_asset("/dashboard/#x"), a);
}

TEST(DashboardAssets, RejectsOtherPathsAndTraversal) {
  EXPECT_EQ(find_dashboard_asset("/"), nullptr);
  EXPECT_EQ(find_dashboard_asset(""), nullptr);
  EXPECT_EQ(find_dashboard_asset("/metrics"), nullptr);
  EXPECT_EQ(find_dashboard_asset("/dashboardx"), nullptr);
  EXPECT_EQ(find_dashboard_asset("/dashboard/nope.js"), nullptr);
  EXPECT_EQ(find_dashboard_asset("/dashboard/../metrics"), nullptr);
  EXPECT_EQ(find_dashboard_asset("/dashboard/sub/app.js"), nullptr);
  EXPECT_EQ(find_dashboard_asset("/dashboard/.hidden"), nullptr);
  EXPECT_EQ(find_dashboard_asset("/dashboard//"), nullptr);
  EXPECT_EQ(find_dashboard_asset("/static/dashboard/app.js"), nullptr);
}

TEST(DashboardAssets, PlaceholderSaysHowToBuildWhenWebDistWasMissing) {
  if (dashboard_assets_built()) GTEST_SKIP() << "web/dist was built: the full set is checked below";
  const StaticAsset* a = find_dashboard_asset("/dashboard");
  ASSERT_NE(a, nullptr);
  EXPECT_NE(a->body.find("scripts/build-web.sh"), std::string_view::npos);
}

TEST(DashboardAssets, EveryReferencedFileIsEmbeddedWithItsContentType) {
  if (!dashboard_assets_built())
    GTEST_SKIP() << "built without web/dist (run scripts/build-web.sh and rebuild)";
  const StaticAsset* index = find_dashboard_asset("/dashboard");
  ASSERT_NE(index, nullptr);
  std::string html(index->body);
  std::regex ref(R"re((?:src|href)="([^"]+)")re");
  int local = 0;
  for (std::sregex_iterator it(html.begin(), html.end(), ref), end; it != end; ++it) {
    std::string url = (*it)[1];
    if (url.rfind("data:", 0) == 0) continue;
    ASSERT_EQ(url.rfind("/dashboard/", 0), 0u) << "not served locally: " << url;
    const StaticAsset* a = find_dashboard_asset(url);
    ASSERT_NE(a, nullptr) << url;
    EXPECT_GT(a->body.size(), 100u) << url;
    if (url.ends_with(".js")) {
      EXPECT_EQ(a->content_type, "text/javascript; charset=utf-8") << url;
    }
    if (url.ends_with(".css")) {
      EXPECT_EQ(a->content_type, "text/css; charset=utf-8") << url;
    }
    ++local;
  }
  EXPECT_GE(local, 5);  // uPlot js + css, prom.js, app.js, style.css
  const StaticAsset* uplot = find_dashboard_asset("/dashboard/uPlot.iife.min.js");
  ASSERT_NE(uplot, nullptr);
  EXPECT_NE(uplot->body.find("uPlot"), std::string_view::npos);
  // Bodies are byte-exact (no trailing terminator counted).
  EXPECT_NE(uplot->body.back(), '\0');
}

}  // namespace
}  // namespace sluice

// RequestInProgress (gateway/http/requests_in_progress.h): the requests in progress on this thread,
// which the data path reads to decide whether to wait behind the worker's other handlers.
#include "gateway/http/requests_in_progress.h"

#include <optional>
#include <thread>

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(RequestInProgress, CountsTheGuardsAliveOnThisThreadOnly) {
  const int before = RequestInProgress::count();
  std::optional<RequestInProgress> a;
  a.emplace();
  {
    RequestInProgress b;
    EXPECT_EQ(RequestInProgress::count(), before + 2);
    int other_thread = -1;
    std::thread([&] { other_thread = RequestInProgress::count(); }).join();
    EXPECT_EQ(other_thread, 0);  // another worker's thread has its own count
  }
  EXPECT_EQ(RequestInProgress::count(), before + 1);
  a.reset();
  EXPECT_EQ(RequestInProgress::count(), before);
}

}  // namespace
}  // namespace sluice

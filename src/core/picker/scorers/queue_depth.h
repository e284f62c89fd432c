// Queue depth scorer (llm-d's queue scorer): min-max normalised over the candidates,
//   score = (maxQ - q) / (maxQ - minQ),  1 for every endpoint when all queues are equal.
// q is LoadEstimate::waiting, which includes assignments since the last scrape (burst spreading)
// and follows the staleness rule.
#pragma once
#include <span>

namespace sluice {

void queue_depth_scores(std::span<const double> queues, std::span<double> out);

}  // namespace sluice

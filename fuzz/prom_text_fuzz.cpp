// libFuzzer target for the Prometheus text parser and the engine-metrics mapping on top of it.
// Build: cmake -DSLUICE_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ ...; run: prom_text_fuzz fuzz/corpus/prom_text
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/picker/engine_metrics.h"
#include "core/prom_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  sluice::PromText t = sluice::parse_prom_text(text);
  for (auto kind : {sluice::EngineKind::vllm, sluice::EngineKind::sglang, sluice::EngineKind::trtllm})
    (void)sluice::map_engine_metrics(t, kind);
  return 0;
}

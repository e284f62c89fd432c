// Hand-written scans over raw JSON text, for the few places that must see structure simdjson's On
// Demand front end skips (request.cpp: nesting depth and trailing content) or that look for one member
// without parsing the document (response_fields.cpp: the usage object at a completion's end).
#pragma once
#include <cstring>

namespace sluice {

// The end of the JSON string whose contents start at `start` (just after its opening quote): a pointer
// just past the closing quote, or nullptr if it is unterminated before `end`. A string's bytes are
// found with memchr for its quotes (glibc's is vectorised: a 220 KB message costs ~10k instructions
// instead of ~2M byte by byte). A quote ends the string when an even number of backslashes precedes it
// (each pair is an escaped backslash); the escapes themselves are not searched for, so code pasted into
// a prompt (an escaped newline or quote every few bytes) costs one memchr per escaped quote, not two per
// escape. Linear: a run of backslashes is counted once, by the quote that follows it.
inline const char* json_string_end(const char* start, const char* end) {
  for (const char* p = start;;) {
    const auto* quote = static_cast<const char*>(std::memchr(p, '"', static_cast<size_t>(end - p)));
    if (quote == nullptr) return nullptr;
    const char* b = quote;
    while (b > start && b[-1] == '\\') --b;
    p = quote + 1;
    if (((quote - b) & 1) == 0) return p;  // not escaped
  }
}

}  // namespace sluice

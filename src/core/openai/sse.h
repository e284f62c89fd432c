// Incremental Server-Sent Events parser (the WHATWG event-stream grammar) for relaying a model
// server's stream without buffering it whole. Bytes are appended as they arrive; `next` hands out
// each complete event block (up to and including its terminating blank line) with its fields.
//
//   - Lines end with CRLF, LF or a lone CR; a CR at the very end of the input counts as a line end
//     and a LF that follows it in the next append is folded into that line end.
//   - `data:` lines are joined with '\n'; one optional space after the colon is dropped; lines
//     starting with ':' are comments; a field without a colon has an empty value.
//   - Every block ends at a blank line and is returned, even without data (comments, keep-alive
//     pings): `raw` spans all of its bytes, so concatenating the raw of every block and then
//     `pending()` reproduces the input byte for byte.
//   - A block longer than `max_event_bytes` puts the parser in a failed state (`failed()`).
// Views in a returned event stay valid until the next call to `append` or `next`.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace sluice {

struct SseEvent {
  std::string_view raw;    // every byte of the block, including the blank line that ends it
  std::string_view event;  // `event:` field, empty when absent
  std::string_view id;     // `id:` field, empty when absent
  std::string_view data;   // `data:` lines joined by '\n'
  bool has_data = false;   // at least one `data:` line (an empty data line still counts)
};

class SseParser {
 public:
  explicit SseParser(size_t max_event_bytes = 4u << 20) : max_event_bytes_(max_event_bytes) {}

  void append(std::string_view bytes);
  // The next complete block, or false when none is complete yet.
  bool next(SseEvent& out);

  // Bytes of the incomplete block held so far (a partial event).
  std::string_view pending() const;
  bool failed() const { return failed_; }
  size_t events() const { return events_; }

 private:
  struct Span {
    size_t begin = 0, end = 0;
    bool set = false;
  };
  size_t max_event_bytes_;
  std::string buf_;
  size_t block_start_ = 0;  // start of the current (incomplete) block in buf_
  size_t scan_ = 0;         // where line scanning resumes
  bool skip_lf_ = false;    // the previous line ended with a CR at the end of the input
  bool failed_ = false;
  size_t events_ = 0;
  Span event_, id_, data_first_;
  size_t data_lines_ = 0;
  std::string data_joined_;  // used only when a block has more than one data line
};

}  // namespace sluice

// The fixed chat template shared by the engine simulator (which tokenises the rendered text) and
// the gateway's prefix index (which hashes it). A Llama-3 style template: every message is framed
// by role headers, so a shared system prompt and a growing conversation render to texts that share
// a byte prefix, exactly as real engines see shared token prefixes.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct ChatMessage {
  std::string role;
  std::string content;  // text parts joined in order; non-text parts contribute their JSON
};

// The text before the first message, and after the last (the assistant header the model continues
// from). parse_request renders straight from the parser with these and the per-message framing
// below (request.cpp's RenderSink).
inline constexpr std::string_view kChatBegin = "<|begin_of_text|>";
inline constexpr std::string_view kChatTrailer = "<|start_header_id|>assistant<|end_header_id|>\n\n";

// The end of each message's turn.
inline constexpr std::string_view kChatEndOfTurn = "<|eot_id|>";

// Appends the header that opens a message of `role` (its text follows, then kChatEndOfTurn).
inline void append_chat_header(std::string& out, std::string_view role) {
  out += "<|start_header_id|>";
  out += role;
  out += "<|end_header_id|>\n\n";
}

// Renders messages in order, then the assistant header that the model continues from.
inline std::string render_chat(const std::vector<ChatMessage>& messages) {
  std::string out(kChatBegin);
  size_t n = out.size();
  // 48 = the header, end-of-header and end-of-turn tags around each message; 47 the trailer. A
  // short reserve reallocates (and copies) the whole rendered prompt on the last append.
  for (const auto& m : messages) n += m.role.size() + m.content.size() + 48;
  out.reserve(n + 48);
  for (const auto& m : messages) {
    append_chat_header(out, m.role);
    out += m.content;
    out += kChatEndOfTurn;
  }
  out += kChatTrailer;
  return out;
}

}  // namespace sluice

#include "models/runtime/tokenizer.h"

#include <fmt/format.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/runtime/model.h"

namespace rlsim::models {
namespace {

namespace fs = std::filesystem;

/// Length of the UTF-8 sequence starting with byte b (1 for a stray continuation byte).
std::size_t utf8_length(unsigned char b) {
  if (b >= 0xF0) return 4;
  if (b >= 0xE0) return 3;
  if (b >= 0xC0) return 2;
  return 1;
}

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

/// Decodes one code point at s[i] (advancing i); invalid bytes decode as themselves.
std::uint32_t next_codepoint(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const std::size_t n = utf8_length(b0);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return b0;
  }
  std::uint32_t cp = b0 & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

// GPT-2's byte-to-unicode table (openai/gpt-2 encoder.py bytes_to_unicode): printable Latin-1
// bytes map to themselves, the other 68 to U+0100 onwards.
struct ByteMap {
  std::string to_unicode[256];
  std::unordered_map<std::string, unsigned char> to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const std::uint32_t cp = printable ? static_cast<std::uint32_t>(b) : static_cast<std::uint32_t>(256 + n++);
      to_unicode[b] = utf8(cp);
      to_byte[to_unicode[b]] = static_cast<unsigned char>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// Character classes of the GPT-2 pre-tokenisation pattern. Approximation (documented in the
// class comment): letters are ASCII letters and every code point >= 0x80 that is not a space or
// in the general / CJK punctuation blocks; numbers are ASCII digits.
bool is_space(std::uint32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
bool is_digit(std::uint32_t c) { return c >= '0' && c <= '9'; }
bool is_letter(std::uint32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (is_space(c)) return false;
  if ((c >= 0x2000 && c <= 0x206F) || (c >= 0x3000 && c <= 0x303F) || (c >= 0xFF00 && c <= 0xFF0F)) return false;
  return !(c >= 0xA1 && c <= 0xBF) && c != 0xD7 && c != 0xF7;
}

/// GPT-2 pattern: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// with digits isolated first (tokenizers' Digits(individual_digits) pre-tokenizer).
std::vector<std::string> pretokenize(std::string_view text, bool individual_digits) {
  std::vector<std::uint32_t> cps;
  std::vector<std::size_t> at;  // byte offset of each code point
  for (std::size_t i = 0; i < text.size();) {
    at.push_back(i);
    cps.push_back(next_codepoint(text, i));
  }
  at.push_back(text.size());
  const std::size_t n = cps.size();
  std::vector<std::string> out;
  auto emit = [&](std::size_t a, std::size_t b) { out.emplace_back(text.substr(at[a], at[b] - at[a])); };
  auto run = [&](std::size_t i, auto pred) {
    while (i < n && pred(cps[i])) ++i;
    return i;
  };
  std::size_t i = 0;
  while (i < n) {
    const std::uint32_t c = cps[i];
    if (c == '\'' && i + 1 < n) {
      static const char* kSuffix[] = {"s", "t", "re", "ve", "m", "ll", "d"};
      std::size_t matched = 0;
      for (const char* s : kSuffix) {
        const std::size_t len = std::strlen(s);
        bool ok = true;
        for (std::size_t k = 0; ok && k < len; ++k) ok = i + 1 + k < n && cps[i + 1 + k] == static_cast<unsigned char>(s[k]);
        if (ok) {
          matched = len;
          break;
        }
      }
      if (matched) {
        emit(i, i + 1 + matched);
        i += 1 + matched;
        continue;
      }
    }
    const std::size_t s = c == ' ' && i + 1 < n ? i + 1 : i;  // optional leading space
    const std::uint32_t d = cps[s];
    if (is_letter(d)) {
      const std::size_t e = run(s, is_letter);
      emit(i, e);
      i = e;
      continue;
    }
    if (is_digit(d)) {
      const std::size_t e = individual_digits ? s + 1 : run(s, is_digit);
      emit(i, e);
      i = e;
      continue;
    }
    if (!is_space(d)) {
      const std::size_t e = run(s, [](std::uint32_t x) { return !is_space(x) && !is_letter(x) && !is_digit(x); });
      emit(i, e);
      i = e;
      continue;
    }
    // Whitespace: \s+(?!\S) leaves the last space of a run to the word that follows.
    std::size_t e = run(i, is_space);
    if (e < n && e - i > 1) --e;
    emit(i, e);
    i = e;
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ModelFileError(path + ": cannot open");
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

// ---- llama2.c ----------------------------------------------------------------------------------

Llama2cTokenizer::Llama2cTokenizer(const std::string& path, int vocab_size) {
  const std::string data = read_file(path);
  std::size_t off = 0;
  auto take = [&](void* dst, std::size_t n, int token) {
    if (off + n > data.size()) {
      throw ModelFileError(
          fmt::format("{}: truncated at token {} of {} (offset {}, file {} bytes)", path, token, vocab_size, off, data.size()));
    }
    std::memcpy(dst, data.data() + off, n);
    off += n;
  };
  std::int32_t max_len = 0;
  take(&max_len, 4, -1);
  if (max_len <= 0 || max_len > 1 << 16)
    throw ModelFileError(fmt::format("{}: corrupt header: max_token_length {}", path, max_len));
  pieces_.resize(static_cast<std::size_t>(vocab_size));
  scores_.resize(static_cast<std::size_t>(vocab_size));
  for (int t = 0; t < vocab_size; ++t) {
    std::int32_t len = 0;
    take(&scores_[static_cast<std::size_t>(t)], 4, t);
    take(&len, 4, t);
    if (len < 0 || len > max_len)
      throw ModelFileError(fmt::format("{}: token {}: length {} outside 0..{}", path, t, len, max_len));
    std::string& p = pieces_[static_cast<std::size_t>(t)];
    p.resize(static_cast<std::size_t>(len));
    take(p.data(), static_cast<std::size_t>(len), t);
    index_.emplace(p, t);
  }
  if (off != data.size())
    throw ModelFileError(fmt::format("{}: {} trailing bytes after {} tokens", path, data.size() - off, vocab_size));
}

std::vector<int> Llama2cTokenizer::encode(std::string_view text, bool bos) const {
  std::vector<int> tokens;
  if (bos) tokens.push_back(1);
  if (!text.empty()) {
    const auto it = index_.find(" ");
    if (it != index_.end()) tokens.push_back(it->second);
  }
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = std::min(utf8_length(static_cast<unsigned char>(text[i])), text.size() - i);
    const auto it = index_.find(std::string(text.substr(i, n)));
    if (it != index_.end()) {
      tokens.push_back(it->second);
    } else {
      for (std::size_t k = 0; k < n; ++k) tokens.push_back(static_cast<unsigned char>(text[i + k]) + 3);
    }
    i += n;
  }
  const std::size_t first = bos ? 1 : 0;
  while (true) {
    float best = -1e10f;
    int best_id = -1;
    std::size_t best_at = 0;
    for (std::size_t i = first; i + 1 < tokens.size(); ++i) {
      const auto it =
          index_.find(pieces_[static_cast<std::size_t>(tokens[i])] + pieces_[static_cast<std::size_t>(tokens[i + 1])]);
      if (it != index_.end() && scores_[static_cast<std::size_t>(it->second)] > best) {
        best = scores_[static_cast<std::size_t>(it->second)];
        best_id = it->second;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    tokens[best_at] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  return tokens;
}

std::string Llama2cTokenizer::decode(int prev, int token) const {
  if (token < 0 || token >= vocab_size()) return {};
  std::string piece = pieces_[static_cast<std::size_t>(token)];
  if (prev == 1 && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  unsigned int byte = 0;
  if (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%02X>", &byte) == 1) return std::string(1, static_cast<char>(byte));
  return piece;
}

// ---- byte-level BPE ------------------------------------------------------------------------------

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw ModelFileError(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  try {
    const auto& model = j.at("model");
    if (model.value("type", "") != "BPE")
      throw ModelFileError(fmt::format("{}: model.type '{}' (expected BPE)", path, model.value("type", "")));
    const auto& pre = j.at("pre_tokenizer");
    // Supported: ByteLevel (GPT-2 pattern), optionally after Digits(individual_digits).
    bool byte_level = false;
    const auto check = [&](const nlohmann::json& p) {
      const std::string type = p.value("type", "");
      if (type == "ByteLevel" && p.value("use_regex", true)) {
        byte_level = true;
      } else if (type == "Digits") {
        digits_ = p.value("individual_digits", false);
      } else {
        throw ModelFileError(fmt::format(
            "{}: pre_tokenizer '{}' is not supported (supported: ByteLevel with the GPT-2 pattern, Digits)", path, type));
      }
    };
    if (pre.value("type", "") == "Sequence") {
      for (const auto& p : pre.at("pretokenizers")) check(p);
    } else {
      check(pre);
    }
    if (!byte_level) throw ModelFileError(path + ": pre_tokenizer has no ByteLevel step");
    // Token ids index the piece table: each must be in 0..2^24 (the largest vocabularies in use
    // hold about 2^18 tokens), so a corrupt id can neither index outside it nor size it absurdly.
    constexpr int kMaxTokenId = 1 << 24;
    const auto token_id = [&](const nlohmann::json& v, const std::string& token) {
      const bool ok = v.is_number_unsigned()
                          ? v.get<std::uint64_t>() < static_cast<std::uint64_t>(kMaxTokenId)
                          : v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() < kMaxTokenId;
      if (!ok)
        throw ModelFileError(
            fmt::format("{}: token '{}' has id {}, not an integer in 0..{}", path, token, v.dump(), kMaxTokenId - 1));
      return static_cast<int>(v.get<std::int64_t>());
    };
    int size = 0;
    for (const auto& [tok, id] : model.at("vocab").items()) size = std::max(size, token_id(id, tok) + 1);
    for (const auto& t : j.at("added_tokens")) size = std::max(size, token_id(t.at("id"), t.value("content", "")) + 1);
    pieces_.resize(static_cast<std::size_t>(size));
    special_.assign(static_cast<std::size_t>(size), false);
    for (const auto& [tok, id] : model.at("vocab").items()) {
      pieces_[static_cast<std::size_t>(id.get<int>())] = tok;
      index_.emplace(tok, id.get<int>());
    }
    for (const auto& t : j.at("added_tokens")) {
      const int id = t.at("id").get<int>();
      const std::string content = t.at("content").get<std::string>();
      pieces_[static_cast<std::size_t>(id)] = content;
      special_[static_cast<std::size_t>(id)] = true;
      specials_.emplace_back(content, id);
      if (content == "<|endoftext|>" || content == "</s>") eos_ = eos_ < 0 ? id : eos_;
      if (content == "<s>" || content == "<|begin_of_text|>") bos_ = id;
    }
    if (bos_ < 0) bos_ = eos_;
    // Longest special first, so "<|im_start|>" is not cut by a shorter prefix.
    std::sort(specials_.begin(), specials_.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    int rank = 0;
    for (const auto& m : model.at("merges")) {
      const std::string pair = m.is_array() ? m[0].get<std::string>() + " " + m[1].get<std::string>() : m.get<std::string>();
      merge_rank_.emplace(pair, rank++);
    }
  } catch (const nlohmann::json::exception& e) {
    throw ModelFileError(fmt::format("{}: {}", path, e.what()));
  }
}

std::vector<int> ByteLevelBpeTokenizer::bpe(const std::string& word) const {
  std::vector<std::string> sym;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t n = utf8_length(static_cast<unsigned char>(word[i]));
    sym.push_back(word.substr(i, n));
    i += n;
  }
  while (sym.size() > 1) {
    int best = INT_MAX;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = merge_rank_.find(sym[i] + " " + sym[i + 1]);
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == INT_MAX) break;
    // Merge every occurrence of the best pair, left to right (GPT-2 bpe()).
    const std::string a = sym[at], b = sym[at + 1];
    std::vector<std::string> next;
    for (std::size_t i = 0; i < sym.size();) {
      if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
        next.push_back(a + b);
        i += 2;
      } else {
        next.push_back(sym[i++]);
      }
    }
    sym.swap(next);
  }
  std::vector<int> ids;
  for (const auto& s : sym) {
    const auto it = index_.find(s);
    if (it != index_.end()) {
      ids.push_back(it->second);
    } else {  // no merge produced an unknown symbol: fall back to its single characters
      for (std::size_t i = 0; i < s.size();) {
        const std::size_t n = utf8_length(static_cast<unsigned char>(s[i]));
        const auto c = index_.find(s.substr(i, n));
        if (c != index_.end()) ids.push_back(c->second);
        i += n;
      }
    }
  }
  return ids;
}

std::vector<int> ByteLevelBpeTokenizer::encode(std::string_view text, bool bos) const {
  std::vector<int> ids;
  if (bos && bos_ >= 0) ids.push_back(bos_);
  const ByteMap& bm = byte_map();
  std::size_t start = 0;
  auto plain = [&](std::string_view part) {
    for (const std::string& piece : pretokenize(part, digits_)) {
      std::string mapped;
      for (const char ch : piece) mapped += bm.to_unicode[static_cast<unsigned char>(ch)];
      const auto whole = index_.find(mapped);
      if (whole != index_.end()) {
        ids.push_back(whole->second);
      } else {
        for (int id : bpe(mapped)) ids.push_back(id);
      }
    }
  };
  for (std::size_t i = 0; i < text.size();) {
    bool hit = false;
    for (const auto& [content, id] : specials_) {
      if (!content.empty() && text.compare(i, content.size(), content) == 0) {
        plain(text.substr(start, i - start));
        ids.push_back(id);
        i += content.size();
        start = i;
        hit = true;
        break;
      }
    }
    if (!hit) ++i;
  }
  plain(text.substr(start));
  return ids;
}

std::string ByteLevelBpeTokenizer::decode(int /*prev*/, int token) const {
  if (token < 0 || token >= vocab_size()) return {};
  const std::string& piece = pieces_[static_cast<std::size_t>(token)];
  if (special_[static_cast<std::size_t>(token)]) return piece;
  const ByteMap& bm = byte_map();
  std::string out;
  for (std::size_t i = 0; i < piece.size();) {
    const std::size_t n = utf8_length(static_cast<unsigned char>(piece[i]));
    const auto it = bm.to_byte.find(piece.substr(i, n));
    if (it != bm.to_byte.end()) out += static_cast<char>(it->second);
    i += n;
  }
  return out;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, int vocab_size) {
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) return std::make_unique<ByteLevelBpeTokenizer>((p / "tokenizer.json").string());
  if (p.extension() == ".json") return std::make_unique<ByteLevelBpeTokenizer>(path);
  return std::make_unique<Llama2cTokenizer>(path, vocab_size);
}

}  // namespace rlsim::models

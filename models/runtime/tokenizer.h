// Tokenizers of the real runtime: llama2.c's SentencePiece-style BPE (tok512.bin) and Hugging
// Face byte-level BPE (tokenizer.json, GPT-2 / SmolLM / Qwen style).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rlsim::models {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Token ids of `text`, with the BOS id first when `bos`.
  virtual std::vector<int> encode(std::string_view text, bool bos) const = 0;
  /// The bytes `token` stands for when it follows `prev` (llama2.c strips the space after BOS).
  virtual std::string decode(int prev, int token) const = 0;
  virtual int vocab_size() const = 0;
  virtual int bos() const = 0;
  virtual int eos() const = 0;
};

/// llama2.c tokenizer file: int32 max_token_length, then per token float32 score, int32 length,
/// bytes. Encoding as llama2.c run.c: BOS, a dummy-prefix " " token for non-empty text, one token
/// per UTF-8 character (byte tokens id = byte + 3 when the character is not in the vocabulary),
/// then repeatedly merge the adjacent pair whose concatenation is in the vocabulary with the
/// highest score (first such pair on ties). Throws ModelFileError naming the file and token index
/// when the file is truncated or a length is negative or too large.
class Llama2cTokenizer final : public Tokenizer {
 public:
  Llama2cTokenizer(const std::string& path, int vocab_size);
  std::vector<int> encode(std::string_view text, bool bos) const override;
  std::string decode(int prev, int token) const override;
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  int bos() const override { return 1; }
  int eos() const override { return 2; }

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> index_;
};

/// Hugging Face tokenizer.json with a byte-level BPE model: GPT-2 byte-to-unicode map, merges
/// applied by rank (openai/gpt-2 encoder.py bpe()), the GPT-2 pre-tokenisation pattern optionally
/// after Digits(individual_digits) (SmolLM), added special tokens matched verbatim first.
/// Approximation: the pattern's \p{L} is ASCII letters plus every code point >= 0x80 outside the
/// spaces and punctuation blocks, \p{N} ASCII digits. Other pre-tokenizers (the Llama-3 / Qwen2
/// Split pattern) are refused. Throws ModelFileError naming the file and the missing key.
class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  explicit ByteLevelBpeTokenizer(const std::string& path);
  std::vector<int> encode(std::string_view text, bool bos) const override;
  std::string decode(int prev, int token) const override;
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  int bos() const override { return bos_; }
  int eos() const override { return eos_; }

 private:
  std::vector<int> bpe(const std::string& word) const;  // word in byte-to-unicode form
  std::vector<std::string> pieces_;                     // id -> token string (byte-to-unicode form)
  std::unordered_map<std::string, int> index_;
  std::unordered_map<std::string, int> merge_rank_;    // "a b" -> rank
  std::vector<std::pair<std::string, int>> specials_;  // added tokens matched verbatim
  std::vector<bool> special_;                          // id is an added (special) token
  int bos_ = -1, eos_ = -1;
  bool digits_ = false;  // Digits(individual_digits) pre-tokenizer
};

/// tokenizer.json (or a directory holding one) -> ByteLevelBpeTokenizer; any other file ->
/// Llama2cTokenizer with `vocab_size` tokens.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, int vocab_size);

}  // namespace rlsim::models

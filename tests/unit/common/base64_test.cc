// DecodeBase64: the CUDA IPC handle of /v2/cudasharedmemory/region/NAME/register, as Python's
// tritonclient (one line) and Triton's C++ client and perf_analyzer (libb64: a line break every 72
// characters and a trailing newline) encode it; malformed text is refused, never half-decoded.
#include "common/base64.h"

#include <gtest/gtest.h>

#include <string>

namespace nereid {
namespace {

TEST(Base64Test, DecodesPaddedText) {
  EXPECT_EQ(DecodeBase64(""), std::string());
  EXPECT_EQ(DecodeBase64("TQ=="), std::string("M"));
  EXPECT_EQ(DecodeBase64("TWE="), std::string("Ma"));
  EXPECT_EQ(DecodeBase64("TWFu"), std::string("Man"));
  EXPECT_EQ(DecodeBase64("AP8A/w=="), std::string("\x00\xff\x00\xff", 4));
}

TEST(Base64Test, SkipsTheLineBreaksOfLibb64) {
  // 64 bytes (a cudaIpcMemHandle_t) are 88 characters: libb64 writes 72, a newline, 16, a newline.
  std::string bytes;
  for (int i = 0; i < 64; ++i) bytes.push_back(static_cast<char>(i * 7 + 1));
  const std::string one_line =
      "AQgPFh0kKzI5QEdOVVxjanF4f4aNlJuiqbC3vsXM09rh6O/2/QQLEhkgJy41PENKUVhfZm10e4KJkJee"
      "payzug==";
  ASSERT_EQ(DecodeBase64(one_line), bytes);
  const std::string libb64 = one_line.substr(0, 72) + "\n" + one_line.substr(72) + "\n";
  EXPECT_EQ(DecodeBase64(libb64), bytes);
  EXPECT_EQ(DecodeBase64("TW\r\nFu"), std::string("Man"));
  EXPECT_EQ(DecodeBase64("TQ==\n"), std::string("M"));
}

TEST(Base64Test, RefusesMalformedText) {
  EXPECT_FALSE(DecodeBase64("TWF"));       // not a multiple of 4
  EXPECT_FALSE(DecodeBase64("TW\nF"));     // nor after the line break is skipped
  EXPECT_FALSE(DecodeBase64("TW!u"));      // outside the alphabet
  EXPECT_FALSE(DecodeBase64("T==="));      // padding too early in its group
  EXPECT_FALSE(DecodeBase64("TQ==TWFu"));  // data after the padding
  EXPECT_FALSE(DecodeBase64("TQ=a"));      // data inside the padding
  EXPECT_FALSE(DecodeBase64("=AAA"));
}

}  // namespace
}  // namespace nereid

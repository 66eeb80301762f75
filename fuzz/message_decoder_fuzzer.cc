// libFuzzer target for the wire decoders: protocol/messages.h Decode() (NWW01, worker <->
// coordinator) and protocol/control.h DecodeControlRequest()/DecodeControlReply() (NWC01).
//
// Input format: a sequence of frames, each a 2-byte little-endian length and that many bytes
// (a truncated last frame takes what is left); at most 8 frames. fuzz/corpus/ holds valid
// messages in this format as seeds; fuzz/nw.dict has the protocol's tokens.
//
// Properties checked on every input:
//  * the decoders never crash, throw, or trip ASan/UBSan;
//  * whatever decodes re-encodes, and decoding that encoding gives the same encoding again
//    (the codec is stable after one normalisation).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "protocol/control.h"
#include "protocol/messages.h"

namespace {

zmq::multipart_t Split(const uint8_t* data, size_t size) {
  zmq::multipart_t frames;
  size_t i = 0;
  while (i < size && frames.size() < 8) {
    size_t len = data[i];
    if (i + 1 < size) len |= static_cast<size_t>(data[i + 1]) << 8;
    i += 2;
    if (i > size) i = size;
    len = std::min(len, size - i);
    frames.addmem(data + i, len);
    i += len;
  }
  return frames;
}

std::string Flat(const zmq::multipart_t& m) {
  std::string out;
  for (const auto& f : m) {
    out += std::to_string(f.size()) + ":";
    out.append(static_cast<const char*>(f.data()), f.size());
  }
  return out;
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "property violated: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nw::CodecLimits limits{size_t{1} << 16};
  const zmq::multipart_t frames = Split(data, size);

  if (auto m = nw::Decode(frames, limits); m.ok()) {
    auto once = nw::Encode(*m, nw::CodecLimits{size_t{1} << 20});
    if (!once.ok()) Fail("a decoded NWW01 message does not encode");
    auto again = nw::Decode(*once, nw::CodecLimits{size_t{1} << 20});
    if (!again.ok()) Fail("an encoded NWW01 message does not decode");
    auto twice = nw::Encode(*again, nw::CodecLimits{size_t{1} << 20});
    if (!twice.ok() || Flat(*once) != Flat(*twice)) Fail("NWW01 encoding is not stable");
  }
  if (auto r = nw::DecodeControlRequest(frames, limits); r.ok()) {
    auto once = nw::EncodeControlRequest(*r, nw::CodecLimits{size_t{1} << 20});
    if (!once.ok()) Fail("a decoded control request does not encode");
    auto again = nw::DecodeControlRequest(*once, nw::CodecLimits{size_t{1} << 20});
    if (!again.ok()) Fail("an encoded control request does not decode");
    auto twice = nw::EncodeControlRequest(*again, nw::CodecLimits{size_t{1} << 20});
    if (!twice.ok() || Flat(*once) != Flat(*twice)) Fail("control request encoding not stable");
  }
  if (auto r = nw::DecodeControlReply(frames, limits); r.ok()) {
    auto once = nw::EncodeControlReply(*r, nw::CodecLimits{size_t{1} << 20});
    if (!once.ok()) Fail("a decoded control reply does not encode");
    auto again = nw::DecodeControlReply(*once, nw::CodecLimits{size_t{1} << 20});
    if (!again.ok()) Fail("an encoded control reply does not decode");
    auto twice = nw::EncodeControlReply(*again, nw::CodecLimits{size_t{1} << 20});
    if (!twice.ok() || Flat(*once) != Flat(*twice)) Fail("control reply encoding not stable");
  }
  return 0;
}

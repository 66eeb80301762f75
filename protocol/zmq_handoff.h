// SendFrames / RecvFrames: multipart send and receive that tell ThreadSanitizer about libzmq's
// message hand-over (docs/sanitizers.md). Elsewhere they are exactly multipart_t::send / recv.
//
// Over inproc:// a frame's body travels by pointer: the sending thread writes it (cppzmq copies
// the encoded bytes in), libzmq's lock-free pipe passes it on, and the receiving thread reads it.
// libzmq is not instrumented, so TSan cannot see the pipe's ordering and would flag every byte
// of the body as a race; suppressing those reports is not enough, because TSan still unwinds
// and matches each one (a 4,096-job SUBMIT part took minutes to decode that way). Releasing each
// body's address before the send and acquiring it after the receive states the ordering libzmq
// provides, so the reads are ordered after the writes and nothing is reported or suppressed.
#pragma once

#include <zmq.hpp>
#include <zmq_addon.hpp>

#if defined(__SANITIZE_THREAD__)
#define NW_ZMQ_TSAN_HANDOFF 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NW_ZMQ_TSAN_HANDOFF 1
#endif
#endif
#ifdef NW_ZMQ_TSAN_HANDOFF
#include <sanitizer/tsan_interface.h>
#endif

namespace nw {

/// multipart_t::send, after releasing each frame's body to the thread that will receive it.
inline bool SendFrames(zmq::multipart_t& frames, zmq::socket_ref socket, int flags = 0) {
#ifdef NW_ZMQ_TSAN_HANDOFF
  for (zmq::message_t& m : frames) {
    if (m.size() > 0) __tsan_release(m.data());
  }
#endif
  return frames.send(socket, flags);
}

/// multipart_t::recv, then acquiring each frame's body from the thread that sent it.
inline bool RecvFrames(zmq::multipart_t& frames, zmq::socket_ref socket, int flags = 0) {
  if (!frames.recv(socket, flags)) return false;
#ifdef NW_ZMQ_TSAN_HANDOFF
  for (zmq::message_t& m : frames) {
    if (m.size() > 0) __tsan_acquire(m.data());
  }
#endif
  return true;
}

}  // namespace nw

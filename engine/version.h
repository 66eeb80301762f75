// The engine's semantic version, on its own: a constant with no dependencies, so that whoever
// stamps it on jobs (the coordinator's campaign expansion) or reports it (workers, `nw serve`,
// `nw status`) needs none of the engine.
// Thread-safety: a constant.
#pragma once

namespace nw {

/// Engine semantic version: bump it whenever outputs of any backend may change. It is part of
/// every job key, so results from an older engine are never reused for a newer one.
/// 0.2.0: the shared expert's SwiGLU is clamped unless config.json says
/// "swiglu_clamp_shared_expert": false (a config without the key runs differently under the same
/// config digest; docs/engine-reference.md).
inline constexpr const char* kEngineVersion = "nw-engine-0.2.0";

}  // namespace nw

// The git revision `nw` was built from ("unknown" outside a git checkout), for `nw --version` and
// `nw status`. Defined in a file CMake generates (cli/git_rev.cc.in), so a new revision
// recompiles that one file instead of every source of the binary. Not part of job keys: those
// carry kEngineVersion (engine/version.h).
#pragma once

namespace nw {

const char* GitRevision();

}  // namespace nw

// nw keygen NAME: writes a CURVE key pair, NAME.key (secret, mode 0600) and NAME.pub, and prints
// the public key. The coordinator uses its NAME.key with --curve-key and lists the workers' and
// clients' .pub files with --allow; workers and clients use their own NAME.key with --curve-key
// and the coordinator's .pub with --server-key (docs/distributed.md, "Security").
// Exit codes: 0 written; 1 cannot write; 2 bad arguments (or the files exist, without --force).
#include <iostream>

#include "cli/commands.h"
#include "coordinator/curve.h"

namespace nw::cli {

void RegisterKeygen(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("keygen", "Write a CURVE key pair (NAME.key and NAME.pub)");
  auto name = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  cmd->add_option("name", *name, "Path prefix of the two files")->required();
  cmd->add_flag("--force", *force, "Replace existing files");
  cmd->callback([name, force, &g] {
    auto keys = GenerateCurveKeyPair();
    if (!keys.ok()) {
      std::cerr << "nw keygen: " << keys.status().ToString() << "\n";
      g.exit_code = 1;
      return;
    }
    Status st = WriteCurveKeyFiles(*name, *keys, *force);
    if (!st.ok()) {
      std::cerr << "nw keygen: " << st.message() << "\n";
      g.exit_code = st.code() == StatusCode::kAlreadyExists ? 2 : 1;
      return;
    }
    if (!g.quiet) std::cerr << "wrote " << *name << ".key (secret) and " << *name << ".pub\n";
    std::cout << keys->public_key << "\n";
  });
}

}  // namespace nw::cli

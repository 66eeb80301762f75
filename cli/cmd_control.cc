// nw cancel | pause | resume CAMPAIGN --coordinator tcp://HOST:PORT: change a submitted
// campaign's state on a coordinator daemon.
//   pause   no new jobs of the campaign start; running ones finish and are kept.
//   resume  the campaign runs again.
//   cancel  its queued jobs leave the schedule (they stay queued in the database, and jobs it
//           shares with another campaign still run for that one); running ones finish and are
//           kept. `nw submit` brings it back.
// Exit codes: 0 done; 1 the coordinator refused or could not be reached; 2 bad arguments.
#include <iostream>

#include "cli/commands.h"
#include "coordinator/control_client.h"

namespace nw::cli {
namespace {

struct ControlArgs {
  std::string campaign;
  std::string coordinator;
  std::string server_key;
  std::string curve_key;
  int64_t timeout_ms = 5000;
};

int RunOp(CampaignOp op, const ControlArgs& a) {
  const std::string verb(CampaignOpName(op));
  auto options = ClientOptionsFromFlags(a.coordinator, a.server_key, a.curve_key, a.timeout_ms);
  if (!options.ok()) {
    std::cerr << "nw " << verb << ": " << options.status().message() << "\n";
    return 2;
  }
  zmq::context_t context;
  ControlClient client(context, *options);
  auto reply = client.Op(op, a.campaign);
  if (!reply.ok()) {
    std::cerr << "nw " << verb << ": " << reply.status().ToString() << "\n";
    return 1;
  }
  std::cout << "campaign '" << reply->campaign << "': " << reply->state;
  if (op == CampaignOp::kCancel) {
    std::cout << " (" << reply->queued_removed << " queued jobs taken out of the schedule)";
  }
  std::cout << "\n";
  return 0;
}

void Register(CLI::App& app, Globals& g, CampaignOp op, const std::string& help) {
  auto* cmd = app.add_subcommand(std::string(CampaignOpName(op)), help);
  auto a = std::make_shared<ControlArgs>();
  cmd->add_option("campaign", a->campaign, "Campaign name")->required();
  cmd->add_option("--coordinator", a->coordinator, "The coordinator's endpoint (tcp://HOST:PORT)")
      ->envname("NW_COORDINATOR");
  cmd->add_option("--server-key", a->server_key,
                  "The coordinator's public key (NAME.pub or Z85): use CURVE");
  cmd->add_option("--curve-key", a->curve_key, "This client's key pair (NAME.key)");
  cmd->add_option("--timeout-ms", a->timeout_ms, "Wait this long for the reply (3 tries)")
      ->capture_default_str();
  cmd->callback([a, &g, op] { g.exit_code = RunOp(op, *a); });
}

}  // namespace

void RegisterControl(CLI::App& app, Globals& g) {
  Register(app, g, CampaignOp::kCancel,
           "Cancel a campaign on a coordinator (queued jobs leave the schedule)");
  Register(app, g, CampaignOp::kPause, "Pause a campaign on a coordinator (no new jobs start)");
  Register(app, g, CampaignOp::kResume, "Resume a paused campaign on a coordinator");
}

}  // namespace nw::cli

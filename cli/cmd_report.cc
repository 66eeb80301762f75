// nw report CAMPAIGN: the boundary report from the database (read-only), as text, Markdown,
// JSON or a self-contained HTML page.
#include <unistd.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "coordinator/campaign/campaign.h"
#include "db/store.h"
#include "report/html.h"
#include "report/report.h"

using nw::report::CampaignReport;
using nw::report::LoadCampaignReport;
using nw::report::RenderHtml;
using nw::report::RenderJson;
using nw::report::RenderMarkdown;
using nw::report::RenderText;
using nw::report::TextOptions;

namespace nw::cli {
namespace {

Status ShowReport(const Globals& g, const std::string& name, const std::string& format,
                  bool color) {
  if (!std::filesystem::exists(g.db_path)) {
    return Status::NotFound("no database at " + g.db_path + " (run a campaign first, or --db)");
  }
  NW_ASSIGN_OR_RETURN(auto store, Store::Open(g.db_path, Store::Mode::kReadOnly));
  // The verdicts use the criterion the campaign states (its stored YAML), or the defaults.
  Criterion criterion;
  NW_ASSIGN_OR_RETURN(std::optional<CampaignRecord> record, store->FindCampaign(name));
  if (record && !record->source_text.empty()) {
    NW_ASSIGN_OR_RETURN(criterion, ParseCampaignCriterion(
                                       record->source_text,
                                       record->source_path.empty() ? name : record->source_path));
  }
  NW_ASSIGN_OR_RETURN(CampaignReport report, LoadCampaignReport(*store, name, criterion));
  if (format == "text") {
    TextOptions to;
    to.color = color && report::ColorAllowedOn(fileno(stdout));
    std::cout << RenderText(report, to);
  } else if (format == "markdown" || format == "md") {
    std::cout << RenderMarkdown(report);
  } else if (format == "json") {
    std::cout << RenderJson(report).dump(2) << "\n";
  } else if (format == "html") {
    std::cout << RenderHtml(report);
  } else {
    return Status::InvalidArgument("--format must be text, markdown, json or html, not '" + format +
                                   "'");
  }
  return Status::Ok();
}

}  // namespace

void RegisterReport(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("report", "Boundary report of a campaign from the database");
  auto name = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("text");
  auto no_color = std::make_shared<bool>(false);
  cmd->add_option("campaign", *name, "Campaign name")->required();
  cmd->add_option("--format", *format, "text, markdown, json or html")->capture_default_str();
  cmd->add_flag("--no-color", *no_color,
                "No ANSI colours even on a terminal (also: NO_COLOR set, or TERM=dumb)");
  cmd->callback([name, format, no_color, &g] {
    Status s = ShowReport(g, *name, *format, !*no_color);
    if (!s.ok()) {
      std::cerr << "nw report: " << s.ToString() << "\n";
      g.exit_code = 2;
    }
  });
}

}  // namespace nw::cli

// nw: the needlework command line. Subcommands are registered in cli/commands.h.
#include <CLI/CLI.hpp>
#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"needlework: find where long-context retrieval breaks in sparse-attention engines"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}

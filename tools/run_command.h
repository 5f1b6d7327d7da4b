// Runs a command the tools ask (sacctmgr, scontrol, squeue): no shell, its
// stdout captured, its stderr left on ours so the user sees why it failed.
#ifndef PLANC_TOOLS_RUN_COMMAND_H_
#define PLANC_TOOLS_RUN_COMMAND_H_

#include <optional>
#include <string>
#include <vector>

namespace planc::tools {

// argv[0] looked up in PATH.  Its stdout, or nullopt with `*why` set
// ("sacctmgr not found", "sacctmgr failed (exit 1)") when it could not run
// or did not exit 0.
std::optional<std::string> run_command(const std::vector<std::string>& argv, std::string* why);

}  // namespace planc::tools

#endif  // PLANC_TOOLS_RUN_COMMAND_H_

#include "tools/run_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace planc::tools {

std::optional<std::string> run_command(const std::vector<std::string>& argv, std::string* why) {
  int fds[2];
  if (argv.empty() || pipe(fds) != 0) {
    *why = argv.empty() ? "no command" : "pipe failed";
    return std::nullopt;
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    *why = "fork failed";
    return std::nullopt;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    *why = WIFEXITED(st) && WEXITSTATUS(st) == 127 ? argv[0] + " not found"
           : WIFEXITED(st) ? argv[0] + " failed (exit " + std::to_string(WEXITSTATUS(st)) + ")"
                           : argv[0] + " was killed by signal " + std::to_string(WTERMSIG(st));
    return std::nullopt;
  }
  return out;
}

}  // namespace planc::tools

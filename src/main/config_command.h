// `nereid config check` and `nereid config generate`: a repository or one model read the way a
// load reads it, without serving. For CI pipelines that ship model repositories.
#pragma once

#include <string>
#include <vector>

namespace nereid {

// args: what follows "config" on the command line. Returns the process exit status.
int ConfigMain(const std::vector<std::string>& args);

}  // namespace nereid

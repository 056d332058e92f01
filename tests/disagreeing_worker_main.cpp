// disagreeing_worker: stands in for mlatune-worker (MLATUNE_WORKER) and
// answers every request the way the real worker answers one it does not
// understand: an error reply of kind "internal".  It is how a test makes
// mlatune's own parts disagree, to see that the CLI reports an internal error
// (exit 3) and not bad input or a broken environment.
#include <nlohmann/json.hpp>

#include <string>

#include "tuner/worker.h"

int main() {
  // The same descriptors the real worker gets: requests on 3, replies on 4.
  mlatune::MessageReader requests(3);
  nlohmann::json request;
  while (requests.read(request) == mlatune::MessageReader::Status::message) {
    const std::string type = request.value("type", std::string("?"));
    mlatune::write_message(4, nlohmann::json{{"type", "error"},
                                             {"kind", "internal"},
                                             {"message", "unknown request '" + type + "'"}});
  }
  return 0;
}

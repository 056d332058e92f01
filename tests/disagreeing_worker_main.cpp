// disagreeing_worker: stands in for mlatune-worker (MLATUNE_WORKER) and
// answers every request the way the real worker answers one it does not
// understand: an error reply of kind "internal".  It is how a test makes
// mlatune's own parts disagree, to see that the CLI reports an internal error
// (exit 3) and not bad input or a broken environment.
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "tuner/worker/codec.h"
#include "tuner/worker/framing.h"
#include "tuner/worker/messages.h"

int main() {
  // The same descriptors the real worker gets: requests on 3, replies on 4.
  mlatune::MessageReader requests(3);
  std::vector<std::uint8_t> request;
  while (requests.read(request) == mlatune::MessageReader::Status::message) {
    // The request's name, as the real worker's codec spells it on the wire.
    static constexpr const char* names[] = {"probe", "set_workload", "evaluate", "retime", "test_fault", "quit"};
    const std::size_t index = mlatune::decode_request(request).index();
    const std::string type = index < std::size(names) ? names[index] : "?";
    mlatune::ErrorReply reply{mlatune::ErrorReply::Kind::internal, "unknown request '" + type + "'", false};
    mlatune::write_message(4, mlatune::encode_reply(reply));
  }
  return 0;
}

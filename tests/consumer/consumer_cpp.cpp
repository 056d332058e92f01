// Uses the C++ runtime (mlatune::runtime) through the installed headers:
// loads the installed fused MLA space, checks what it declares, and opens a
// Dispatcher on a database (argv[1]).  With a GPU it prints the choice at
// one shape; without one, Dispatcher::open must throw EnvironmentError
// "no GPU: ...".  Exit 0 only when the runtime behaved as its headers say.
#include <cstdio>
#include <exception>
#include <string>

#include "cache/mla.h"
#include "core/error.h"
#include "data_dir.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_cpp DATABASE\n");
    return 2;
  }
  const std::string space_file = std::string(MLATUNE_DATA_DIR) + "/search_spaces/fused_mla_attention.yaml";
  try {
    mlatune::SearchSpace space = mlatune::SearchSpace::load(space_file);
    std::printf("consumer_cpp: %s loaded: kernel %s, %zu shape variables\n", space_file.c_str(),
                space.kernel_name().c_str(), space.shape_variables().size());
    if (space.kernel_name() != "fused_mla_attention" || space.shape_variables().size() != 5) return 1;
    try {
      auto dispatcher = mlatune::Dispatcher::open(argv[1], space_file);
      mlatune::MlaAttention mla(*dispatcher);
      std::printf("consumer_cpp: %s\n", dispatcher->describe(mla.shape(2, 64, 4, 16, 24)).text.c_str());
    } catch (const mlatune::EnvironmentError& error) {
      const std::string message = error.what();
      if (message.rfind("no GPU: ", 0) != 0) throw;
      std::printf("consumer_cpp: Dispatcher::open says %s\n", message.c_str());
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "consumer_cpp: %s\n", error.what());
    return 1;
  }
}

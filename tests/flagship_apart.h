// The flagship space, whose prologue is compiled apart for tf32x3_kvgemm,
// tf32x3_wgmma_ws and f16x3_wgmma_ws (search_spaces/fused_mla_attention.yaml, prologue.apart):
// for prologue_apart_test and bench_compile, which refuse to run on a space
// without it rather than test nothing.
#pragma once
#include <filesystem>

#include "core/error.h"
#include "core/space.h"

namespace mlatune::test_support {

inline SearchSpace flagship_with_prologue_apart() {
  const std::filesystem::path spaces = std::filesystem::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces";
  SearchSpace space = SearchSpace::load(spaces / "fused_mla_attention.yaml");
  const Config tf32x3_kvgemm = space.parse_config(
      "ALGORITHM=tf32x3_kvgemm,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=64,HEADS_PER_BLOCK=1,STAGE_LATENT=true,"
      "KEY_TILE=32,FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1");
  if (!space.prologue_apart_config(tf32x3_kvgemm, space.parse_shape("B=4,T=1024,H=16,D=64,R=128")))
    throw InternalError("fused_mla_attention.yaml no longer compiles tf32x3_kvgemm's prologue apart");
  return space;
}

}  // namespace mlatune::test_support

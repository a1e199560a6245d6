// The HTTP route parser on its own: every route Triton's HTTP API has, versions good and bad,
// percent-encoded names, query strings, repeated slashes, and paths that are no route at all, each
// with its API group (--http-restricted-api).
#include "frontend/http/http_routes.h"

#include <gtest/gtest.h>

#include <string>

namespace nereid::http {
namespace {

TEST(HttpRoutes, EveryRouteOfTheApi) {
  struct Case {
    const char* target;
    Route::Kind kind;
  } cases[] = {
      {"/v2", Route::kServerMetadata},
      {"/v2/health/live", Route::kHealthLive},
      {"/v2/health/ready", Route::kHealthReady},
      {"/v2/models/m", Route::kModelMetadata},
      {"/v2/models/m/ready", Route::kModelReady},
      {"/v2/models/m/config", Route::kModelConfig},
      {"/v2/models/m/infer", Route::kModelInfer},
      {"/v2/models/m/stats", Route::kModelStats},
      {"/v2/models/stats", Route::kAllStats},
      {"/v2/models/m/generate", Route::kGenerate},
      {"/v2/models/m/generate_stream", Route::kGenerate},
      {"/v2/models/m/trace/setting", Route::kTrace},
      {"/v2/trace/setting", Route::kTrace},
      {"/v2/logging", Route::kLogging},
      {"/v2/repository/index", Route::kRepoIndex},
      {"/v2/repository/models/m/load", Route::kRepoLoad},
      {"/v2/repository/models/m/unload", Route::kRepoUnload},
      {"/v2/systemsharedmemory/status", Route::kSharedMemory},
      {"/v2/systemsharedmemory/region/r/register", Route::kSharedMemory},
      {"/v2/cudasharedmemory/region/r/unregister", Route::kSharedMemory},
  };
  for (const Case& c : cases) {
    const Route r = Match(c.target);
    EXPECT_EQ(r.kind, c.kind) << c.target;
    EXPECT_TRUE(GroupOf(r.kind).has_value()) << c.target;
  }
  EXPECT_EQ(GroupOf(Route::kModelInfer), ApiGroup::kInference);
  EXPECT_EQ(GroupOf(Route::kRepoLoad), ApiGroup::kModelRepository);
  EXPECT_EQ(GroupOf(Route::kModelReady), ApiGroup::kHealth);
  EXPECT_FALSE(GroupOf(Route::kNotFound).has_value());
}

TEST(HttpRoutes, ModelNamesVersionsAndQueries) {
  Route r = Match("/v2/models/my%20model/versions/3/infer?x=1&y=/v2/other");
  EXPECT_EQ(r.kind, Route::kModelInfer);
  EXPECT_EQ(r.model, "my model");
  EXPECT_EQ(r.version, 3);
  EXPECT_FALSE(r.bad_version);
  // Repeated slashes are one separator, as in Triton's matching.
  r = Match("//v2//models//m//ready");
  EXPECT_EQ(r.kind, Route::kModelReady);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.version, -1);
  // A version that is no number is kept as bad (the handler answers Triton's error).
  r = Match("/v2/models/m/versions/x1/infer");
  EXPECT_EQ(r.kind, Route::kModelInfer);
  EXPECT_TRUE(r.bad_version);
  r = Match("/v2/models/m/versions/99999999999999999999999/infer");
  EXPECT_TRUE(r.bad_version);
  // '%' without two hex digits stays; a decoded '/' or NUL is the model-name check's to refuse.
  EXPECT_EQ(Match("/v2/models/a%2/config").model, "a%2");
  EXPECT_EQ(Match("/v2/models/a%zz/config").model, "a%zz");
  EXPECT_EQ(Match("/v2/models/a%2Fb/config").model, "a/b");
  EXPECT_EQ(Match("/v2/models/a%00b/config").model, std::string("a\0b", 3));
  EXPECT_EQ(Match("/v2/repository/models/r%41/load").model, "rA");
  // Shared memory: the region and the action.
  r = Match("/v2/cudasharedmemory/region/gpu0/status");
  EXPECT_EQ(r.kind, Route::kSharedMemory);
  EXPECT_TRUE(r.cuda);
  EXPECT_EQ(r.model, "gpu0");
  EXPECT_EQ(r.action, "status");
}

TEST(HttpRoutes, WhatIsNoRoute) {
  for (const char* target : {"",
                             "/",
                             "/v1",
                             "/v2x",
                             "/v3/models/m",
                             "/v2/health",
                             "/v2/health/alive",
                             "/v2/health/live/more",
                             "/v2/models",
                             "/v2/models/m/infer/more",
                             "/v2/models/m/unknown",
                             "/v2/models/m/versions",
                             "/v2/models/m/trace",
                             "/v2/models/m/trace/settings",
                             "/v2/repository",
                             "/v2/repository/index/more",
                             "/v2/repository/models/m",
                             "/v2/repository/models/m/reload",
                             "/v2/systemsharedmemory",
                             "/v2/systemsharedmemory/register",
                             "/v2/systemsharedmemory/region/r/delete",
                             "/v2/logging/more",
                             "/v2/trace",
                             "?/v2",
                             "v2/models/m/ready/x"}) {
    EXPECT_EQ(Match(target).kind, Route::kNotFound) << "'" << target << "'";
  }
  // Without a leading slash the path still splits the same way (a request line's target has one).
  EXPECT_EQ(Match("v2/models/m/ready").kind, Route::kModelReady);
}

TEST(HttpRoutes, HostileTargetsEndWithoutHarm) {
  std::string deep = "/v2/models/m";
  for (int i = 0; i < 10000; ++i) deep += "/versions/1";
  EXPECT_EQ(Match(deep).kind, Route::kNotFound);
  EXPECT_EQ(Match(std::string(100000, '/')).kind, Route::kNotFound);
  EXPECT_EQ(Match("/v2/models/" + std::string(100000, '%')).kind, Route::kModelMetadata);
  EXPECT_EQ(Match(std::string("/v2/models/m\0/ready", 19)).kind, Route::kModelReady);
}

}  // namespace
}  // namespace nereid::http

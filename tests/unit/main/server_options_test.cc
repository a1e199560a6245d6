// The command line of `nereid serve` on its own: tritonserver's flag names in both forms
// (--flag=value, --flag value, bare booleans), the bounds of every number, Triton's flags that are
// accepted and ignored, and one clear error for each kind of bad argument.
#include "main/server_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace nereid {
namespace {

StatusOr<ServerOptions> Parse(std::vector<std::string> args) { return ParseServerOptions(args); }

std::string Error(std::vector<std::string> args) {
  auto o = Parse(std::move(args));
  EXPECT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), Status::Code::kInvalidArgument);
  return o.ok() ? "" : o.status().message();
}

TEST(ServerOptions, TritonLaunchFlagsInEveryForm) {
  auto o = Parse({"--model-repository=/m",
                  "--model-store",
                  "/n",
                  "--model-control-mode=explicit",
                  "--load-model=a",
                  "--load-model",
                  "b",
                  "--http-port",
                  "8080",
                  "--grpc-port=0",
                  "--metrics-port=9",
                  "--strict-readiness",
                  "false",
                  "--allow-metrics",
                  "--exit-on-error=no",
                  "--log-verbose=2",
                  "--model-load-timeout-secs=7",
                  "--backend-config=onnxruntime,x=1",
                  "--id",
                  "server-1",
                  "--allow-sagemaker=false"});
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->repository.paths, (std::vector<std::string>{"/m", "/n"}));
  EXPECT_EQ(o->repository.control_mode, ModelControlMode::kExplicit);
  EXPECT_EQ(o->repository.startup_models, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(o->http.port, 8080);
  EXPECT_EQ(o->grpc.port, 0);
  EXPECT_EQ(o->metrics_port, 9);
  EXPECT_FALSE(o->repository.strict_readiness);
  EXPECT_TRUE(o->allow_metrics);  // a bare boolean is true
  EXPECT_FALSE(o->exit_on_error);
  EXPECT_EQ(o->log_verbose, 2);
  EXPECT_EQ(o->repository.load_timeout.count(), 7000);
}

TEST(ServerOptions, DefaultsAreTritonsAndHelpNeedsNoRepository) {
  auto o = Parse({"--model-repository=/m"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->http.port, 8000);
  EXPECT_EQ(o->grpc.port, 8001);
  EXPECT_EQ(o->metrics_port, 8002);
  EXPECT_TRUE(o->exit_on_error);
  EXPECT_FALSE(o->allow_client_shm);
  EXPECT_EQ(o->repository.control_mode, ModelControlMode::kNone);
  auto help = Parse({"--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_TRUE(help->help);
}

TEST(ServerOptions, EachBadArgumentGetsItsError) {
  EXPECT_EQ(Error({}), "--model-repository is required");
  EXPECT_EQ(Error({"/m"}), "unexpected argument '/m'");
  EXPECT_EQ(Error({"--model-repository=/m", "--no-such-flag"}),
            "unknown option --no-such-flag (see --help)");
  EXPECT_EQ(Error({"--model-repository"}), "--model-repository needs a value");
  EXPECT_EQ(Error({"--model-repository", "--http-port=1"}), "--model-repository needs a value");
  EXPECT_EQ(Error({"--model-repository=/m", "--http-port=65536"}),
            "--http-port expects a number in [0, 65535], got '65536'");
  EXPECT_EQ(Error({"--model-repository=/m", "--http-port=-1"}),
            "--http-port expects a number in [0, 65535], got '-1'");
  EXPECT_EQ(Error({"--model-repository=/m", "--http-port=80x"}),
            "--http-port expects a number in [0, 65535], got '80x'");
  EXPECT_EQ(Error({"--model-repository=/m", "--http-port="}),
            "--http-port expects a number in [0, 65535], got ''");
  EXPECT_EQ(Error({"--model-repository=/m", "--http-port=99999999999999999999999"}),
            "--http-port expects a number in [0, 65535], got '99999999999999999999999'");
  EXPECT_EQ(Error({"--model-repository=/m", "--strict-readiness=maybe"}),
            "--strict-readiness expects true or false, got 'maybe'");
  EXPECT_EQ(Error({"--model-repository=/m", "--model-control-mode=sometimes"}),
            "--model-control-mode must be none, explicit or poll, got 'sometimes'");
  EXPECT_EQ(Error({"--model-repository=/m", "--load-model=a"}),
            "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' as "
            "well.");
  EXPECT_EQ(Error({"--model-repository=/m", "--allow-vertex-ai=true"}),
            "--allow-vertex-ai=true: Nereid serves the KServe v2 protocol over HTTP and gRPC only");
  EXPECT_EQ(Error({"--model-repository=/m", "--onnx-engine=../x"}),
            "--onnx-engine must be auto or a backend name, got '../x'");
}

}  // namespace
}  // namespace nereid

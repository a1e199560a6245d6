// ResponsePath: stages run in their declared order whatever order parts declare them in, a stage
// may hold a response and hand it on later, a refusal unwinds what the stages took, a request with
// no stage keeps its callback, and docs/architecture.md's request diagram lists the stages in the
// order of kResponseStageNames.
#include "request/response_path.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace nereid {
namespace {

std::unique_ptr<InferenceRequest> Request(std::vector<std::string>* seen) {
  auto r = std::make_unique<InferenceRequest>();
  r->on_complete = [seen](std::unique_ptr<InferenceResponse> response) {
    seen->push_back("sink:" + response->id);
  };
  return r;
}

ResponsePath::Stage Mark(std::vector<std::string>* seen, std::string name) {
  return [seen, name](std::unique_ptr<InferenceResponse>& response, ResponsePath&) {
    seen->push_back(name);
    response->id += name[0];
  };
}

std::unique_ptr<InferenceResponse> Response() { return std::make_unique<InferenceResponse>(); }

TEST(ResponsePath, ARequestWithoutStagesKeepsItsCallback) {
  std::vector<std::string> seen;
  auto r = Request(&seen);
  EXPECT_EQ(r->path, nullptr);
  r->on_complete(Response());
  EXPECT_EQ(seen, (std::vector<std::string>{"sink:"}));
}

TEST(ResponsePath, StagesRunInStageOrderWhateverTheOrderTheyWereDeclaredIn) {
  std::vector<std::string> seen;
  auto r = Request(&seen);
  // Declared as the pipeline does (the last stages first, the scheduler's when it takes it).
  ResponsePath::Of(*r).Set(ResponseStage::kTraceTensors, Mark(&seen, "trace"));
  ResponsePath::Of(*r).Set(ResponseStage::kClassification, Mark(&seen, "classification"));
  ResponsePath::Of(*r).Set(ResponseStage::kAdmission, Mark(&seen, "admission"));
  ResponsePath::Of(*r).Set(ResponseStage::kScheduler, Mark(&seen, "scheduler"));
  r->on_complete(Response());
  EXPECT_EQ(seen, (std::vector<std::string>{"scheduler", "admission", "classification", "trace",
                                            "sink:sact"}));
  // A stage removed no longer runs; the others still do, for every response (decoupled models).
  seen.clear();
  r->path->Set(ResponseStage::kClassification, nullptr);
  r->on_complete(Response());
  r->on_complete(Response());
  EXPECT_EQ(seen, (std::vector<std::string>{"scheduler", "admission", "trace", "sink:sat",
                                            "scheduler", "admission", "trace", "sink:sat"}));
}

TEST(ResponsePath, AStageMayHoldAResponseAndHandItOnLater) {
  std::vector<std::string> seen;
  auto r = Request(&seen);
  std::vector<std::pair<ResponseCallback, std::unique_ptr<InferenceResponse>>> held;
  ResponsePath::Of(*r).Set(ResponseStage::kScheduler,
                           [&](std::unique_ptr<InferenceResponse>& response, ResponsePath& path) {
                             held.emplace_back(path.After(ResponseStage::kScheduler),
                                               std::move(response));
                           });
  ResponsePath::Of(*r).Set(ResponseStage::kCache, Mark(&seen, "cache"));
  r->on_complete(Response());
  EXPECT_TRUE(seen.empty());
  ASSERT_EQ(held.size(), 1u);
  // The request may be gone by then (the callback keeps the path alive).
  r.reset();
  held[0].first(std::move(held[0].second));
  EXPECT_EQ(seen, (std::vector<std::string>{"cache", "sink:c"}));
}

TEST(ResponsePath, UnwindGivesBackWhatEachStageTookInStageOrderAndRestoresTheSink) {
  std::vector<std::string> seen;
  auto r = Request(&seen);
  ResponsePath::Of(*r).Set(ResponseStage::kCache, Mark(&seen, "cache"),
                           [&] { seen.push_back("cache refused"); });
  ResponsePath::Of(*r).Set(ResponseStage::kAdmission, Mark(&seen, "admission"),
                           [&] { seen.push_back("admission refused"); });
  ResponsePath::Unwind(*r);
  EXPECT_EQ(seen, (std::vector<std::string>{"admission refused", "cache refused"}));
  EXPECT_EQ(r->path, nullptr);
  seen.clear();
  ResponsePath::Unwind(*r);  // twice: nothing more
  r->on_complete(Response());
  EXPECT_EQ(seen, (std::vector<std::string>{"sink:"}));
}

// The stage line of the request diagram: "scheduler → admission → ... → sink", over two lines of
// the diagram after "stage by stage:".
TEST(ResponsePath, TheArchitectureDiagramListsTheStagesInOrder) {
  std::ifstream page(std::string(NEREID_SOURCE_DIR) + "/docs/architecture.md");
  ASSERT_TRUE(page.good());
  std::stringstream text;
  text << page.rdbuf();
  const std::string doc = text.str();
  const size_t start = doc.find("stage by stage:");
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("sink", start);
  ASSERT_NE(end, std::string::npos);
  std::string line;
  for (size_t i = doc.find('\n', start) + 1; i < end + 4; ++i) {
    if (doc.compare(i, 3, "│") == 0) {  // the diagram's rule (UTF-8)
      i += 2;
      continue;
    }
    line += doc[i] == '\n' ? ' ' : doc[i];
  }
  std::vector<std::string> listed;
  const std::string arrow = "→";
  for (size_t pos = 0;;) {
    const size_t next = line.find(arrow, pos);
    std::string name = line.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    listed.push_back(name);
    if (next == std::string::npos) break;
    pos = next + arrow.size();
  }
  std::vector<std::string> stages(kResponseStageNames.begin(), kResponseStageNames.end());
  EXPECT_EQ(listed, stages) << "docs/architecture.md: '" << line << "'";
}

}  // namespace
}  // namespace nereid

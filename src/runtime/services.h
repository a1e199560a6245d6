// Services: what the models of one server share, made once by main and handed to the repository
// when it is made, and by it to each Model::Create; nothing is set on either afterwards.
#pragma once

#include <memory>

#include "common/clock.h"
#include "request/infer_api.h"

namespace nereid {

class ResponseCache;
class RateLimiter;
namespace energy {
class EnergyLedger;
}
namespace trace {
class TraceManager;
}

struct Services {
  // Where the models send their own requests (BLS, an ensemble's steps): the server that serves
  // them points it at itself while it does.
  std::shared_ptr<InferApiLink> infer_link = std::make_shared<InferApiLink>();
  // The server's response cache, used by models whose config enables it (null: none).
  ResponseCache* cache = nullptr;
  // The rate limiter instances of groups with a rate_limiter register with (null:
  // --rate-limit=off).
  RateLimiter* rate_limiter = nullptr;
  // Energy attribution (null: none). The repository attaches the ledger's observer to each version
  // as it loads (the ledger sits above the runtime, which only sees the observer).
  energy::EnergyLedger* energy = nullptr;
  // Samples the requests for tracing (null: never); the server reads it.
  std::shared_ptr<trace::TraceManager> tracer;
  // The clock schedulers read (tests give their own).
  const Clock* clock = &SteadyClock::Get();
};

}  // namespace nereid

// A Python model's BLS requests (pb_utils.InferenceRequest(...).exec() / async_exec()): each is
// sent into the server on behalf of the calling model, and each of its responses goes back to the
// stub as an 'infer_response' message with its tensors in the payload.
#pragma once

#include <memory>

#include "python/protocol.h"

namespace nereid::python {

// Serves BLS request 'm' from the stub behind 'channel' for 'caller'. A malformed request (fields
// of the wrong type) is answered as the call's error, so the model's exec() returns instead of
// waiting for ever; one without a call id throws (the stub cannot be trusted any more).
void ServeBls(NereidModel* caller, const std::shared_ptr<Channel>& channel, const Message& m);

}  // namespace nereid::python

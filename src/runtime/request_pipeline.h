// The request pipeline: what happens to a routed request as it enters its model, and the path its
// responses take back, in one place. The request is checked against the model's config, then each
// stage of its response path (request/response_path.h) is declared where it applies:
//
//   scheduler        declared by the scheduler as it takes the request (a sequence's state, the
//                    order of responses under preserve_ordering)
//   admission        the model's nereid.max_queued_* limits hold a place until the final response
//   cache            a miss's response is stored
//   ensemble step    an ensemble's step response says whether the model batches
//   classification   outputs the client asked to classify become top-k strings
//   trace tensors    a TENSORS-level trace records the outputs
//   sink             the request's own on_complete (whoever asked)
//
// and it is answered from the response cache or handed to the scheduler. Wherever it is refused,
// the path is unwound and the failure counted in one place.
#pragma once

#include <memory>

#include "common/status.h"
#include "request/inference_request.h"

namespace nereid {

class Model;

// Validates 'request' against 'model' and enqueues it (Model::Enqueue). Answered from the cache,
// the request is done with (null). On error the caller still owns the request, as it came.
Status EnterModel(Model& model, std::unique_ptr<InferenceRequest>& request);

}  // namespace nereid

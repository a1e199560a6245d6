// GatherBody: a Beast body type for responses sent as a list of buffers (a JSON header, then
// output tensors where the backend wrote them), written with one gathered write instead of being
// concatenated into one string first.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/optional.hpp>
#include <string>
#include <utility>
#include <vector>

#include "memory/buffer.h"

namespace nereid::http {

struct GatherBody {
  struct value_type {
    std::string head;
    // Each keeps its bytes alive until the response is destroyed.
    boost::container::small_vector<Buffer, 4> tail;
  };

  static std::uint64_t size(const value_type& body) {
    std::uint64_t n = body.head.size();
    for (const auto& b : body.tail) n += b.size();
    return n;
  }

  class writer {
   public:
    using const_buffers_type = boost::container::small_vector<boost::asio::const_buffer, 5>;

    template <bool isRequest, class Fields>
    writer(const boost::beast::http::header<isRequest, Fields>&, const value_type& body)
        : body_(body) {}

    void init(boost::beast::error_code& ec) { ec = {}; }

    // All of the body at once: the serializer consumes it across as many writes as it takes.
    boost::optional<std::pair<const_buffers_type, bool>> get(boost::beast::error_code& ec) {
      ec = {};
      if (done_) return boost::none;
      done_ = true;
      const_buffers_type buffers;
      buffers.emplace_back(body_.head.data(), body_.head.size());
      for (const auto& b : body_.tail)
        if (b.size() > 0) buffers.emplace_back(b.data(), b.size());
      return std::make_pair(std::move(buffers), false);
    }

   private:
    const value_type& body_;
    bool done_ = false;
  };

  // Responses only.
  class reader;
};

}  // namespace nereid::http

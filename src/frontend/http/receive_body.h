// ReceiveBody: the Beast body type of every request the HTTP frontend reads. Like
// beast::http::string_body, except that it never trusts Content-Length for memory: string_body
// reserves the declared length before a byte of it arrives, so sixteen idle connections that each
// declare 63 MiB held a gigabyte. Here the string grows only with bytes actually received.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <string>

namespace nereid::http {

struct ReceiveBody {
  using value_type = std::string;

  static std::uint64_t size(const value_type& body) { return body.size(); }

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& ec) {
      ec = {};  // the parser's body_limit has already refused a declared length over the limit
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      const std::size_t n = boost::asio::buffer_size(buffers);
      const std::size_t at = body_.size();
      // Amortized growth of what arrived, never of what was announced.
      if (body_.capacity() < at + n) body_.reserve(std::max(at + n, body_.capacity() * 2));
      body_.resize(at + n);
      boost::asio::buffer_copy(boost::asio::buffer(&body_[at], n), buffers);
      ec = {};
      return n;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };

  // Requests only: the frontend never writes this body type.
  class writer;
};

}  // namespace nereid::http

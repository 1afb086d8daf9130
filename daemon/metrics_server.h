#pragma once
// A small HTTP/1.1 server (Boost.Beast) on its own thread that answers GET /metrics
// with what `render` returns, for Prometheus to scrape, and GET /healthz with "ok" for
// a liveness probe. Bounded, so that slow or idle clients cannot keep the scrapes out:
// 8 KiB of request header, 2 s for a request's line and headers, at most 32
// connections and 8 from one address; when full, the connection that has waited
// longest without sending a whole request is closed for the new one. A malformed
// request gets 400 and the connection is closed; other paths 404, other methods 405.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"

namespace gossip::daemon {

class MetricsServer {
 public:
  // `render` runs on the server's thread: it must be safe to call concurrently with
  // the rest of the daemon. port 0 picks a free one (see port()).
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& host, uint16_t port,
                                                      std::function<std::string()> render);
  ~MetricsServer();  // stops serving and joins the thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const;

  struct Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gossip::daemon

#include "cli/keygen.h"

#include <fmt/format.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli/json.h"

namespace gossip::cli {

Result<KeyPair> curve_keypair() {
  if (!zmq_has("curve")) return Status::invalid("this libzmq was built without CURVE (libsodium)");
  char pub[41] = {};
  char sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    return Status::io_error(fmt::format("zmq_curve_keypair: {}", zmq_strerror(errno)));
  return KeyPair{pub, sec};
}

Subcommand add_keygen_command(CLI::App& parent) {
  auto json = std::make_shared<bool>(false);
  CLI::App* app = parent.add_subcommand("keygen",
                                        "Print a new CURVE key pair: the public key goes to the "
                                        "peers, the secret key stays on the node");
  app->add_flag("--json", *json, "Print {\"public_key\": ..., \"secret_key\": ...}");
  return Subcommand{
      app, [json] {
        auto k = curve_keypair();
        if (!k) {
          std::fprintf(stderr, "gossipctl keygen: %s\n", k.status().message().c_str());
          return kExitFailure;
        }
        const std::string out =
            *json ? JsonObjectWriter()
                        .add_string("public_key", k->public_key)
                        .add_string("secret_key", k->secret_key)
                        .str()
                  : fmt::format(
                        "# CURVE key pair (Z85). Keep the secret key on this node only.\n"
                        "public_key = \"{}\"\nsecret_key = \"{}\"",
                        k->public_key, k->secret_key);
        std::printf("%s\n", out.c_str());
        return kExitOk;
      }};
}

}  // namespace gossip::cli

#include "peers/sealed_ring_channel.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "base/refusals.h"

namespace gossip::peers {
namespace {

constexpr uint64_t kSaltTag = ~uint64_t{0};  // the first message, unsealed
constexpr size_t kSaltBytes = 16;
constexpr size_t kKeepBuffers = 8;  // idle buffers kept for the next messages

// A buffer that is not zero-filled: a sealed 64 MiB chunk is written whole anyway.
struct Buffer {
  std::unique_ptr<std::byte[]> data;
  size_t capacity = 0;
  size_t size = 0;
};

class Pool {
 public:
  Buffer take(size_t size) {
    Buffer b;
    if (!idle_.empty()) {
      b = std::move(idle_.back());
      idle_.pop_back();
    }
    if (b.capacity < size) {
      b.data = std::make_unique_for_overwrite<std::byte[]>(size);
      b.capacity = size;
    }
    b.size = size;
    return b;
  }
  void give(Buffer b) {
    if (idle_.size() < kKeepBuffers) idle_.push_back(std::move(b));
  }

 private:
  std::vector<Buffer> idle_;
};

struct CipherCtx {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  ~CipherCtx() { EVP_CIPHER_CTX_free(ctx); }
};

// The message key of one direction of one channel: the sender's salt and the
// receiver's nonce make it the key of this connection and no other.
std::array<uint8_t, 32> message_key(const LinkKey& link, uint64_t session,
                                    const std::array<uint8_t, kSaltBytes>& salt,
                                    const RingNonce& nonce) {
  std::array<uint8_t, 27 + 8 + kSaltBytes + sizeof(RingNonce)> in{};
  std::memcpy(in.data(), "gossipd ring message key v2", 27);
  std::memcpy(in.data() + 27, &session, 8);
  std::memcpy(in.data() + 35, salt.data(), salt.size());
  std::memcpy(in.data() + 35 + kSaltBytes, nonce.data(), nonce.size());
  std::array<uint8_t, 32> key{};
  crypto_generichash(key.data(), key.size(), in.data(), in.size(), link.data(), link.size());
  return key;
}

// Message `sequence`'s nonce, and the data authenticated with it.
std::array<uint8_t, 12> nonce_of(uint64_t sequence) {
  std::array<uint8_t, 12> n{};
  std::memcpy(n.data(), &sequence, 8);
  return n;
}
std::array<uint8_t, 16> header_of(uint64_t tag, uint64_t bytes) {
  std::array<uint8_t, 16> h{};
  std::memcpy(h.data(), &tag, 8);
  std::memcpy(h.data() + 8, &bytes, 8);
  return h;
}

// EVP takes int lengths.
constexpr size_t kPiece = size_t{1} << 30;

class SealedRingChannel final : public RingChannel {
 public:
  SealedRingChannel(std::unique_ptr<RingChannel> inner, const SealKeys& keys)
      : RingChannel(inner->left(), inner->right()), inner_(std::move(inner)), keys_(keys) {
    set_nonces(inner_->nonce_given_left(), inner_->nonce_from_right());
    randombytes_buf(salt_out_.data(), salt_out_.size());
    const auto k =
        message_key(keys_.to_right, keys_.right_session, salt_out_, inner_->nonce_from_right());
    if (EVP_EncryptInit_ex(seal_.ctx, EVP_aes_256_gcm(), nullptr, k.data(), nullptr) != 1)
      failure_ = Status::io_error("ring: cannot set up AES-256-GCM");
    if (failure_.is_ok())
      failure_ = inner_->post_send(kSaltTag, std::as_bytes(std::span(salt_out_)));
    if (failure_.is_ok())
      failure_ = inner_->post_recv(kSaltTag, std::as_writable_bytes(std::span(salt_in_)));
  }
  ~SealedRingChannel() override { sodium_memzero(&keys_, sizeof keys_); }

  Status post_send(uint64_t tag, std::span<const std::byte> data) override {
    if (!failure_.is_ok()) return failure_;
    Buffer out = pool_.take(data.size() + kSealBytes);
    const auto nonce = nonce_of(send_sequence_++);
    const auto header = header_of(tag, data.size());
    int n = 0;
    bool ok = EVP_EncryptInit_ex(seal_.ctx, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
              EVP_EncryptUpdate(seal_.ctx, nullptr, &n, header.data(), header.size()) == 1;
    for (size_t at = 0; ok && at < data.size(); at += kPiece) {
      const size_t k = std::min(kPiece, data.size() - at);
      ok = EVP_EncryptUpdate(seal_.ctx, reinterpret_cast<uint8_t*>(out.data.get() + at), &n,
                             reinterpret_cast<const uint8_t*>(data.data() + at),
                             static_cast<int>(k)) == 1;
    }
    ok = ok &&
         EVP_EncryptFinal_ex(seal_.ctx, reinterpret_cast<uint8_t*>(out.data.get()), &n) == 1 &&
         EVP_CIPHER_CTX_ctrl(seal_.ctx, EVP_CTRL_GCM_GET_TAG, kSealBytes,
                             out.data.get() + data.size()) == 1;
    if (!ok) return fail(Status::io_error("ring: AES-256-GCM failed to seal a message"));
    const std::span<const std::byte> sealed(out.data.get(), out.size);
    sends_.push_back(std::move(out));
    return check(inner_->post_send(tag, sealed));
  }

  Status post_recv(uint64_t tag, std::span<std::byte> buffer) override {
    if (!failure_.is_ok()) return failure_;
    Buffer in = pool_.take(buffer.size() + kSealBytes);
    const std::span<std::byte> sealed(in.data.get(), in.size);
    recvs_.push_back({tag, buffer, std::move(in)});
    return check(inner_->post_recv(tag, sealed));
  }

  Result<size_t> wait_recv(const WaitOptions& wait) override {
    if (!failure_.is_ok()) return failure_;
    if (recvs_.empty()) return Status::invalid("ring: wait_recv with no receive posted");
    if (!opened_) {
      auto salt = inner_->wait_recv(wait);
      if (!salt.is_ok()) return check(salt.status());
      if (*salt != kSaltBytes)
        return fail(Status::protocol(
            fmt::format("ring: peer {} (left) did not open its sealed channel", left())));
      const auto k =
          message_key(keys_.from_left, keys_.left_session, salt_in_, inner_->nonce_given_left());
      if (EVP_DecryptInit_ex(open_.ctx, EVP_aes_256_gcm(), nullptr, k.data(), nullptr) != 1)
        return fail(Status::io_error("ring: cannot set up AES-256-GCM"));
      opened_ = true;
    }
    auto got = inner_->wait_recv(wait);
    if (!got.is_ok()) return check(got.status());
    Recv r = std::move(recvs_.front());
    recvs_.pop_front();
    if (*got < kSealBytes) return forged("is shorter than its seal");
    const size_t bytes = *got - kSealBytes;
    const auto nonce = nonce_of(recv_sequence_++);
    const auto header = header_of(r.tag, bytes);
    int n = 0;
    bool ok = EVP_DecryptInit_ex(open_.ctx, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
              EVP_DecryptUpdate(open_.ctx, nullptr, &n, header.data(), header.size()) == 1;
    for (size_t at = 0; ok && at < bytes; at += kPiece) {
      const size_t k = std::min(kPiece, bytes - at);
      ok = EVP_DecryptUpdate(open_.ctx, reinterpret_cast<uint8_t*>(r.plain.data() + at), &n,
                             reinterpret_cast<const uint8_t*>(r.sealed.data.get() + at),
                             static_cast<int>(k)) == 1;
    }
    ok = ok &&
         EVP_CIPHER_CTX_ctrl(open_.ctx, EVP_CTRL_GCM_SET_TAG, kSealBytes,
                             r.sealed.data.get() + bytes) == 1 &&
         EVP_DecryptFinal_ex(open_.ctx, reinterpret_cast<uint8_t*>(r.plain.data()), &n) == 1;
    pool_.give(std::move(r.sealed));
    if (!ok) {
      // What was written is not the sender's: no caller may read it.
      std::memset(r.plain.data(), 0, bytes);
      return forged("does not open with the link's key");
    }
    return bytes;
  }

  Status wait_sends(const WaitOptions& wait) override {
    if (!failure_.is_ok()) return failure_;
    GOSSIP_RETURN_IF_ERROR(check(inner_->wait_sends(wait)));
    for (auto& b : sends_) pool_.give(std::move(b));
    sends_.clear();
    return Status::ok();
  }

  Status poke() override {
    if (!failure_.is_ok()) return failure_;
    return check(inner_->poke());
  }

  ChannelTimes times() const override { return inner_->times(); }

 private:
  struct Recv {
    uint64_t tag;
    std::span<std::byte> plain;
    Buffer sealed;
  };

  Status forged(const char* how) {
    count_refusal(Refusal::kForged);
    return fail(Status::protocol(fmt::format(
        "ring: a message from peer {} (left) {}: altered on the way, replayed, or not from peer {}",
        left(), how, left())));
  }
  Status check(Status st) { return st.is_ok() ? st : fail(std::move(st)); }
  Status fail(Status why) {
    if (failure_.is_ok()) failure_ = std::move(why);
    return failure_;
  }

  std::unique_ptr<RingChannel> inner_;
  SealKeys keys_;
  Status failure_;
  CipherCtx seal_, open_;
  std::array<uint8_t, kSaltBytes> salt_out_{}, salt_in_{};
  bool opened_ = false;  // salt_in_ arrived and open_ has its key
  uint64_t send_sequence_ = 0;
  uint64_t recv_sequence_ = 0;
  Pool pool_;
  std::deque<Buffer> sends_;  // sealed, until wait_sends
  std::deque<Recv> recvs_;
};

}  // namespace

std::unique_ptr<RingChannel> seal_ring_channel(std::unique_ptr<RingChannel> inner,
                                               const SealKeys& keys) {
  return std::make_unique<SealedRingChannel>(std::move(inner), keys);
}

}  // namespace gossip::peers

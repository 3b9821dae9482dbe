#include "backend/generator.h"

#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/TensorImpl.h>
#include <ATen/Functions.h>

#include <cstring>
#include <mutex>
#include <random>

#include "backend/runtime_state.h"

namespace torch_pjrt::backend {
namespace {

// State is (seed, offset): a counter-based design, as on CUDA. Random ops
// draw from (seed, offset) and advance the offset by what they consumed.
class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  explicit DeviceGenerator(c10::DeviceIndex device)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    std::random_device rd;
    uint64_t s = (static_cast<uint64_t>(rd()) << 32) | rd();
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16,
                "torch_pjrt: a tpu generator state is a uint8 tensor of 16 bytes, got ",
                state.numel(), " elements of ", state.dtype());
    const auto* bytes = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, bytes, 8);
    std::memcpy(&offset_, bytes + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor state = at::empty({16}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(state.data_ptr(), &seed_, 8);
    std::memcpy(static_cast<uint8_t*>(state.data_ptr()) + 8, &offset_, 8);
    return state.getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  DeviceGenerator* clone_impl() const override {
    auto* copy = new DeviceGenerator(device().index());
    copy->seed_ = seed_;
    copy->offset_ = offset_;
    return copy;
  }
  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};

std::mutex generators_mutex;
std::vector<at::Generator>& generators() {
  static auto* g = new std::vector<at::Generator>();
  return *g;
}

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(generators_mutex);
  auto& all = generators();
  if (device < 0) device = 0;
  while (static_cast<c10::DeviceIndex>(all.size()) <= device) {
    all.push_back(at::make_generator<DeviceGenerator>(static_cast<c10::DeviceIndex>(all.size())));
  }
  return all[device];
}

at::Generator make_generator(c10::DeviceIndex device) {
  return at::make_generator<DeviceGenerator>(device < 0 ? 0 : device);
}

BufferPtr take_generator_state(at::Generator gen, int device) {
  uint64_t state[2];
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state[0] = gen.current_seed();
    state[1] = gen.get_offset();
    gen.set_offset(state[1] + 1);
  }
  auto& client = runtime().client();
  return std::make_shared<pjrt::Buffer>(pjrt::Buffer::from_host(
      client, client->device(device), state, pjrt::ElementType::kU64, {2}));
}

}  // namespace torch_pjrt::backend

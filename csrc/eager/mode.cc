#include "eager/mode.h"

#include "eager/pending_graph.h"

namespace torch_pjrt::eager {

void set_eager_mode(backend::EagerMode mode) {
  backend::BackendSettings s = backend::settings();
  bool leaving_fused = s.eager == backend::EagerMode::kFused && mode != backend::EagerMode::kFused;
  s.eager = mode;
  backend::set_settings(s);
  // After the switch: a pending graph that fails to run raises here, in the
  // mode asked for, instead of leaving the process in fused mode.
  if (leaving_fused) flush(-1, "eager mode change");
}

}  // namespace torch_pjrt::eager

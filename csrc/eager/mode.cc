#include "eager/mode.h"

#include "eager/pending_graph.h"

namespace torch_pjrt::eager {

void set_eager_mode(backend::EagerMode mode) {
  backend::BackendSettings s = backend::settings();
  if (s.eager == backend::EagerMode::kFused && mode != backend::EagerMode::kFused) {
    flush(-1, "eager mode change");
  }
  s.eager = mode;
  backend::set_settings(s);
}

}  // namespace torch_pjrt::eager

#include "eager/mode.h"

#include "eager/pending_graph.h"

namespace torch_pjrt::eager {

void set_eager_mode(backend::EagerMode mode) {
  backend::BackendSettings s = backend::settings();
  // Strict eager keeps compiled graphs pending too (backend/graph.cc); only
  // fused mode records ops, so any change of mode runs what is pending.
  bool changed = s.eager != mode;
  s.eager = mode;
  backend::set_settings(s);
  // After the switch: a pending graph that fails to run raises here, in the
  // mode asked for, instead of leaving the process in the old one.
  if (changed) flush(-1, "eager mode change");
}

}  // namespace torch_pjrt::eager

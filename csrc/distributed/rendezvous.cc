#include "distributed/rendezvous.h"

#include <optional>

namespace torch_pjrt::distributed {

std::shared_ptr<Rendezvous> Rendezvous::shared(const std::string& key, int size) {
  static std::mutex registry_mutex;
  static auto* registry = new std::map<std::string, std::weak_ptr<Rendezvous>>();
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& slot = (*registry)[key];
  if (auto existing = slot.lock()) {
    if (existing->size() != size) {
      throw MeetingError("rendezvous '" + key + "' has " + std::to_string(existing->size()) +
                         " ranks, not " + std::to_string(size));
    }
    return existing;
  }
  auto created = std::make_shared<Rendezvous>(size);
  slot = created;
  return created;
}

void Rendezvous::finish_meeting(const std::string& key, Meeting& m, const Action& action) {
  // Everyone is here: compare, then act once for all.
  const Arrival& first = *m.arrivals[0];
  bool agree = true;
  for (const auto& a : m.arrivals) agree = agree && a->signature == first.signature;
  if (!agree) {
    std::string why = "the ranks called different collectives:";
    for (size_t i = 0; i < m.arrivals.size(); ++i) {
      why += " rank " + std::to_string(i) + " called " + m.arrivals[i]->description + ";";
    }
    why.pop_back();
    m.error = why;
    return;
  }
  std::vector<Arrival> all;
  for (auto& a : m.arrivals) all.push_back(*a);
  try {
    m.results = action(all);
  } catch (const std::exception& e) {
    m.error = e.what();
  }
}

Rendezvous::Outcome Rendezvous::meet(const std::string& key, int participants, int index,
                                     Arrival mine, std::chrono::milliseconds timeout,
                                     const Action& action) {
  std::unique_lock<std::mutex> lock(mutex_);
  Meeting& m = meetings_[key];
  if (m.arrivals.empty()) m.arrivals.resize(participants);
  if (m.arrivals[index].has_value()) {
    throw MeetingError("rank " + std::to_string(index) + " arrived twice at " + key);
  }
  m.arrivals[index] = std::move(mine);
  m.arrived++;
  if (!m.done && m.arrived == participants) {
    finish_meeting(key, m, action);
    m.done = true;
    cv_.notify_all();
  } else {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    bool in_time = cv_.wait_until(lock, deadline, [&] { return m.done; });
    if (!in_time && !m.done) {
      std::string missing;
      for (int i = 0; i < participants; ++i) {
        if (!m.arrivals[i].has_value()) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
      }
      m.done = true;
      m.error = "timed out after " + std::to_string(timeout.count()) +
                " ms waiting for rank(s) " + missing + " (rank " + std::to_string(index) +
                " called " + m.arrivals[index]->description + ")";
      cv_.notify_all();
    }
  }
  Outcome outcome;
  std::string error = m.error;
  if (error.empty()) {
    outcome.results = index < static_cast<int>(m.results.size()) ? m.results[index]
                                                                   : std::vector<BufferPtr>{};
    for (auto& a : m.arrivals) outcome.arrivals.push_back(*a);
  }
  if (++m.departed == participants) meetings_.erase(key);
  if (!error.empty()) throw MeetingError(error);
  return outcome;
}

void Rendezvous::post(const std::string& key, Arrival mine) {
  std::lock_guard<std::mutex> lock(mutex_);
  posted_[key] = std::move(mine);
  cv_.notify_all();
}

Rendezvous::Arrival Rendezvous::take(const std::string& key, std::chrono::milliseconds timeout,
                                     const std::string& what) {
  std::unique_lock<std::mutex> lock(mutex_);
  bool found = cv_.wait_for(lock, timeout, [&] { return posted_.count(key) > 0; });
  if (!found) {
    throw MeetingError(what + ": timed out after " + std::to_string(timeout.count()) +
                       " ms waiting for the matching send");
  }
  Arrival a = std::move(posted_[key]);
  posted_.erase(key);
  return a;
}

}  // namespace torch_pjrt::distributed

#include "elastic/elastic_driver.h"

#include <algorithm>
#include <random>

#include "bootstrap/elastic_membership.h"
#include "elastic/host_discovery.h"
#include "kolo/error.h"
#include "launch_error.h"

namespace kolorun {
namespace {

using std::chrono::milliseconds;
namespace membership = kolo::elastic;

constexpr milliseconds kPeriod{50};
// How long a worker that a peer blames may take to ask for a new generation
// itself (it reset on its own) before it counts as stalled.
constexpr milliseconds kBlamedGrace{500};

std::string text_of(const kolo::store::Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

std::string seconds_text(milliseconds d) { return std::to_string(d.count() / 1000.0).substr(0, 5) + " s"; }

}  // namespace

ElasticDriver::ElasticDriver(ElasticOptions options, int np, std::vector<HostSlots> hosts, SpecMaker make_spec,
                             std::unique_ptr<kolo::store::StoreClient> store, bool verbose)
    : verbose_(verbose),
      options_(std::move(options)),
      min_np_(options_.min_np.value_or(np)),
      max_np_(options_.max_np.value_or(np)),
      target_(np),
      hosts_(std::move(hosts)),
      make_spec_(std::move(make_spec)),
      store_(std::move(store)) {}

milliseconds ElasticDriver::period() const { return kPeriod; }

int ElasticDriver::alive_count() const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.alive; }));
}

int ElasticDriver::alive_on(const std::string& host) const {
  int n = 0;
  for (const auto& w : workers_) n += w.alive && w.host == host;
  for (const auto& w : joining_) n += w.host == host;
  for (const auto& w : starting_) n += w.host == host;
  return n;
}

bool ElasticDriver::excluded(const std::string& host) const { return excluded_.count(host) != 0; }

std::vector<LaunchSpec> ElasticDriver::start() {
  next_discovery_ = Clock::now() + options_.discovery_interval;
  int slots = 0;
  for (const auto& h : hosts_) slots += h.slots;
  const int min_np = min_np_;
  if (slots < min_np)
    throw LaunchError("an elastic job needs at least --min-np " + std::to_string(min_np) + " slots, and the hosts give " +
                          std::to_string(slots),
                      1);
  target_ = std::min({target_, slots, max_np_});
  grow();
  // The first workers are generation 0's members from the start.
  for (auto& w : starting_) workers_.push_back(w);
  starting_.clear();
  publish();
  std::vector<LaunchSpec> specs;
  for (const auto& w : workers_) specs.push_back(make_spec_(w.id, w.host));
  return specs;
}

void ElasticDriver::publish() {
  membership::Membership m;
  m.generation = generation_;
  for (const auto& w : workers_)
    if (w.alive) m.members.push_back(membership::Member{w.id, w.host});
  m.members = membership::in_rank_order(std::move(m.members));
  const std::string record = membership::encode_membership(m);
  store_->set(membership::membership_key(generation_), kolo::store::Bytes(record.begin(), record.end()));
  const std::string latest = std::to_string(generation_);
  store_->set(membership::kLatestKey, kolo::store::Bytes(latest.begin(), latest.end()));
}

void ElasticDriver::exclude(const std::string& host, Actions& actions) {
  std::optional<Clock::time_point> until;
  if (options_.cooldown) {
    static std::mt19937_64 random{std::random_device{}()};
    const auto [low, high] = *options_.cooldown;
    std::uniform_int_distribution<long long> pick(low.count(), high.count());
    until = Clock::now() + milliseconds(pick(random));
  }
  excluded_[host] = until;
  actions.reports.push_back("elastic: host " + host + " takes no new workers" +
                            (until ? " until its cooldown ends (--blacklist-cooldown-range)" : std::string()) +
                            "; its other workers go on");
}

bool ElasticDriver::goes_on_without(int worker, int code, const std::string&) {
  auto it = std::find_if(workers_.begin(), workers_.end(), [&](const Worker& w) { return w.id == worker; });
  if (it == workers_.end()) {
    // A new worker that ended before it was taken in: stopped on purpose, given
    // up on a finished job, or failed, which excludes its host as any failure.
    for (auto* list : {&starting_, &joining_}) {
      auto n = std::find_if(list->begin(), list->end(), [&](const Worker& w) { return w.id == worker; });
      if (n == list->end()) continue;
      const std::string host = n->host;
      list->erase(n);
      if (dropped_.erase(worker) == 0 && !finishing_ && !excluded(host)) failed_hosts_.push_back(host);
    }
    return true;
  }
  if (!it->alive) return true;
  it->alive = false;
  const bool on_purpose = removing_.erase(worker) != 0;
  stalled_.erase(worker);
  if (code == 0) {
    // Training is over: the others end too, no one replaces them, and workers
    // still waiting to join give up (bootstrap/elastic_join.h).
    if (!finishing_) {
      finishing_ = true;
      try {
        store_->set(membership::kFinishedKey, kolo::store::Bytes{1});
      } catch (const kolo::Error&) {
      }
    }
    return true;
  }
  if (finishing_) return true;  // a joiner that gave up, or a worker ending with the job
  reform_ = true;
  if (alive_count() == 0) return false;  // every worker failed: the job fails with this one
  // Excluded at the next tick, whose actions carry the report.
  if (!on_purpose && !excluded(it->host)) failed_hosts_.push_back(it->host);
  return true;
}

void ElasticDriver::discover(Actions& actions) {
  if (options_.discovery_script.empty()) return;
  std::vector<HostSlots> found;
  try {
    // One run at a time, read as it goes: the supervisor's loop never waits for it.
    if (!discovery_) {
      if (Clock::now() < next_discovery_) return;
      discovery_ = std::make_unique<DiscoveryRun>(options_.discovery_script, options_.slots_per_host.value_or(1),
                                                  kDiscoveryScriptTimeout);
    }
    auto hosts = discovery_->poll(milliseconds(0));
    if (!hosts) return;
    found = std::move(*hosts);
    discovery_.reset();
    next_discovery_ = Clock::now() + options_.discovery_interval;
  } catch (const kolo::Error& e) {
    discovery_.reset();
    next_discovery_ = Clock::now() + options_.discovery_interval;
    actions.reports.push_back(std::string("elastic: ") + e.what() + "; keeping the hosts it printed last");
    return;
  }
  // Hosts no longer printed lose their workers.
  for (auto& w : workers_) {
    if (!w.alive || removing_.count(w.id)) continue;
    const bool listed = std::any_of(found.begin(), found.end(), [&](const HostSlots& h) { return h.host == w.host; });
    if (listed) continue;
    removing_.insert(w.id);
    actions.kill.push_back(w.id);
    actions.reports.push_back("elastic: host " + w.host + " is gone from the discovery script's list; stopping worker " +
                              std::to_string(w.id));
  }
  drop_new_workers_off(found, actions);
  int before = 0, after = 0;
  for (const auto& h : hosts_) before += excluded(h.host) ? 0 : h.slots;
  for (const auto& h : found) after += excluded(h.host) ? 0 : h.slots;
  if (after > before) target_ = std::min(max_np_, target_ + (after - before));
  if (verbose_ && after != before)
    actions.reports.push_back("elastic: the discovery script's hosts give " + std::to_string(after) +
                              " usable slot(s), " + std::to_string(before) + " before");
  hosts_ = std::move(found);
}

void ElasticDriver::grow() {
  for (const auto& h : hosts_) {
    if (excluded(h.host)) continue;
    while (alive_count() - static_cast<int>(removing_.size()) + static_cast<int>(joining_.size()) +
                   static_cast<int>(starting_.size()) <
               target_ &&
           alive_on(h.host) < h.slots) {
      starting_.push_back(Worker{next_id_++, h.host, true});
    }
  }
}

void ElasticDriver::take_in_ready() {
  for (auto it = starting_.begin(); it != starting_.end();) {
    if (!store_->check({membership::ready_key(it->id)})) {
      ++it;
      continue;
    }
    joining_.push_back(*it);
    it = starting_.erase(it);
    reform_ = true;
  }
}

void ElasticDriver::drop_new_workers_off(const std::vector<HostSlots>& listed, Actions& actions) {
  for (auto* list : {&starting_, &joining_}) {
    for (auto it = list->begin(); it != list->end();) {
      const bool on_list =
          std::any_of(listed.begin(), listed.end(), [&](const HostSlots& h) { return h.host == it->host; });
      if (on_list) {
        ++it;
        continue;
      }
      dropped_.insert(it->id);
      actions.kill.push_back(it->id);
      actions.reports.push_back("elastic: host " + it->host +
                                " is gone from the discovery script's list; stopping new worker " +
                                std::to_string(it->id));
      it = list->erase(it);
    }
  }
}

void ElasticDriver::read_requests(Actions& actions) {
  const std::int64_t requests = store_->add(membership::kRequestsKey, 0);
  if (requests != requests_seen_) {
    requests_seen_ = requests;
    // The generation's members in rank order, to map a blamed rank to its worker.
    const auto current = membership::decode_membership(
        text_of(store_->get(membership::membership_key(generation_), milliseconds(1000))), generation_);
    for (const auto& w : workers_) {
      const std::string key = membership::reset_key(w.id);
      if (!store_->check({key})) continue;
      const auto request = membership::decode_reset_request(text_of(store_->get(key, milliseconds(1000))));
      store_->erase(key);
      if (!request || request->generation != generation_) continue;  // already answered
      reform_ = true;
      requested_.insert(w.id);
      const int blamed = request->blamed_rank;
      if (verbose_)
        actions.reports.push_back("elastic: worker " + std::to_string(w.id) + " asks to re-form" +
                                  (blamed >= 0 ? " (its failure blames rank " + std::to_string(blamed) + ")" : ""));
      if (blamed < 0 || blamed >= static_cast<int>(current.members.size())) continue;
      const int culprit = current.members[static_cast<std::size_t>(blamed)].worker;
      if (culprit != w.id && !blames_.count(culprit))
        blames_[culprit] = Blame{Clock::now() + kBlamedGrace, w.id, blamed};
    }
  }
  // A blamed worker that asks for a new generation too left on its own (it
  // reset); one that stays silent past the grace is stalled, and goes as a
  // failed one would.
  for (auto it = blames_.begin(); it != blames_.end();) {
    const int culprit = it->first;
    auto w = std::find_if(workers_.begin(), workers_.end(), [&](const Worker& o) { return o.id == culprit; });
    const bool gone = w == workers_.end() || !w->alive || removing_.count(culprit);
    if (gone || requested_.count(culprit)) {
      it = blames_.erase(it);
      continue;
    }
    // A stopped process cannot ask: it goes at once, without the grace.
    const bool stopped = stopped_here && stopped_here(culprit);
    if (Clock::now() < it->second.until && !stopped) {
      ++it;
      continue;
    }
    actions.kill.push_back(culprit);
    stalled_.insert(culprit);
    actions.reports.push_back("elastic: worker " + std::to_string(it->second.by) + " blames worker " +
                              std::to_string(culprit) + " (rank " + std::to_string(it->second.rank) +
                              " of generation " + std::to_string(generation_) + "), which " +
                              (stopped ? "is stopped" : "still runs without asking to re-form") + "; killing it");
    it = blames_.erase(it);
  }
}

void ElasticDriver::reform(Actions& actions) {
  if (!reform_) return;
  const int min_np = min_np_;
  const int staying = alive_count() - static_cast<int>(removing_.size());
  if (staying + static_cast<int>(joining_.size()) < min_np) {
    if (!short_since_) {
      short_since_ = Clock::now();
      actions.reports.push_back("elastic: " + std::to_string(staying) + " worker(s) left, fewer than --min-np " +
                                std::to_string(min_np) + "; waiting up to " + seconds_text(options_.timeout) +
                                " (--elastic-timeout) for more slots");
    }
    if (Clock::now() - *short_since_ >= options_.timeout)
      actions.fail = {1, "elastic: fewer than --min-np " + std::to_string(min_np) + " workers for " +
                             seconds_text(options_.timeout) + " (--elastic-timeout); stopping the job"};
    return;
  }
  // The next generation waits for the ends of those being removed, and for
  // blamed workers to show whether they stalled.
  if (!removing_.empty() || !blames_.empty() || !stalled_.empty()) return;
  short_since_.reset();
  reform_ = false;
  requested_.clear();
  blames_.clear();
  ++generation_;
  if (options_.reset_limit && generation_ > *options_.reset_limit) {
    actions.fail = {1, "elastic: the job's workers changed " + std::to_string(generation_) +
                           " times, past --reset-limit " + std::to_string(*options_.reset_limit) +
                           "; stopping the job"};
    return;
  }
  for (auto& w : joining_) workers_.push_back(w);
  publish();
  std::string line = "elastic: generation " + std::to_string(generation_) + " has " + std::to_string(alive_count()) +
                     " worker(s)";
  for (const auto& w : joining_) line += "; worker " + std::to_string(w.id) + " joins on host " + w.host;
  joining_.clear();
  actions.reports.push_back(line);
}

JobPolicy::Actions ElasticDriver::tick() {
  Actions actions;
  if (finishing_) return actions;
  for (const auto& host : failed_hosts_) {
    if (!excluded(host)) exclude(host, actions);
  }
  failed_hosts_.clear();
  const auto now = Clock::now();
  for (auto it = excluded_.begin(); it != excluded_.end();) {
    if (it->second && now >= *it->second) {
      actions.reports.push_back("elastic: host " + it->first + " is back after its cooldown");
      int slots = 0;
      for (const auto& h : hosts_)
        if (h.host == it->first) slots = h.slots;
      target_ = std::min(max_np_, target_ + slots);
      it = excluded_.erase(it);
    } else {
      ++it;
    }
  }
  try {
    discover(actions);
    read_requests(actions);
  } catch (const kolo::Error& e) {
    actions.reports.push_back(std::string("elastic: ") + e.what());
  }
  const std::size_t started = starting_.size();
  grow();
  for (std::size_t i = started; i < starting_.size(); ++i)
    actions.start.push_back(make_spec_(starting_[i].id, starting_[i].host));
  try {
    take_in_ready();
  } catch (const kolo::Error& e) {
    actions.reports.push_back(std::string("elastic: ") + e.what());
  }
  reform(actions);
  return actions;
}

}  // namespace kolorun

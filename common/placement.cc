#include "common/placement.h"

namespace planc {

std::map<uint32_t, std::vector<int>> weight_changes(bool on, const std::vector<NodeWeight>& nodes) {
  std::map<uint32_t, std::vector<int>> out;
  for (const NodeWeight& n : nodes) {
    const uint32_t want = steered_weight(on, n.configured, n.holds_guaranteed);
    if (want != n.current) out[want].push_back(n.index);
  }
  return out;
}

}  // namespace planc

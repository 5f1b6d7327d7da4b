// Packing guaranteed work (planc.conf PackGuaranteed=yes): the node weights
// that make part-node jobs go first to nodes already holding guaranteed
// (P0, P1) work, so that the other nodes stay clearable for guaranteed
// jobs that need whole nodes.
//
// Why: a guaranteed job that needs whole nodes (16 GPUs on nodes of 8) can
// only take a node no guaranteed job holds: guaranteed work is never
// preempted.  Slurm places a part-node job by best fit, wherever free
// GPUs happen to be, so on the steady-state replay part-node guaranteed
// jobs were spread over 9-12 of 16 nodes at the moments a whole-node
// guaranteed job came, where 4-8 nodes would have held them packed.  Such
// a job then found no clearable node (and waited past the 40 s for a
// guaranteed job to end), or cleared the few nodes left, whatever P3 runs
// they held.
//
// How: Slurm's select plugin tries the nodes of the lowest weight first.
// Each node keeps the order its slurm.conf Weight gives it against nodes
// of other weights, and among nodes of the same configured weight the ones
// holding guaranteed work come first:
//     steered = 2 x configured       on a node holding guaranteed work
//     steered = 2 x configured + 1   on any other node
// (configured w1 < w2 gives 2 w1 + 1 < 2 w2).  Spot part-node jobs are
// steered the same way: on a node that holds guaranteed work they are out
// of reach of a whole-node preemptor.  A configured weight too large to
// double is left as it is.
#ifndef PLANC_COMMON_PLACEMENT_H_
#define PLANC_COMMON_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <vector>

namespace planc {

// The largest configured weight that is steered: 2 w + 1 stays under
// 0xfffffffe, Slurm's NO_VAL (a weight update of NO_VAL changes nothing;
// 0xffffffff is INFINITE, which slurm.conf does not accept).  A larger
// configured weight is left as it is, and may then come before steered
// ones: sites use small weights.
inline constexpr uint32_t kMaxSteeredWeight = (0xfffffffeu - 2) / 2;

// The weight a node should have: its configured one when steering is off
// (or the weight is too large to steer), else as above.
inline uint32_t steered_weight(bool on, uint32_t configured, bool holds_guaranteed) {
  if (!on || configured > kMaxSteeredWeight) return configured;
  return 2 * configured + (holds_guaranteed ? 0 : 1);
}

// What steering remembers of a node it has set a weight on.
struct SteeredNode {
  uint32_t configured = 1;  // slurm.conf's weight
  uint32_t set = 1;         // the weight set last
};

// slurm.conf's weight of a node whose node record holds `node_weight`.
// Slurm keeps slurm.conf's weight in the node record and schedules by the
// config record's, which is what a weight update changes; but a
// reconfigure first copies the config record's weight into the node record
// (and a SIGHUP keeps it), so a node weight equal to the one set last is
// ours, not slurm.conf's.  (A slurm.conf weight changed to exactly that
// value would be missed.)
inline uint32_t configured_weight(uint32_t node_weight, const SteeredNode* known) {
  return known && node_weight == known->set ? known->configured : node_weight;
}

// One node as the adapter sees it: its index in slurmctld's node table,
// its weight in slurm.conf, the weight Slurm schedules it by now, and
// whether a running guaranteed job holds any of it.
struct NodeWeight {
  int index = 0;
  uint32_t configured = 1;
  uint32_t current = 1;
  bool holds_guaranteed = false;
};

// The nodes whose weight must change, by the weight they get (one update
// per weight).  Empty when every node has the weight it should.
std::map<uint32_t, std::vector<int>> weight_changes(bool on, const std::vector<NodeWeight>& nodes);

}  // namespace planc

#endif  // PLANC_COMMON_PLACEMENT_H_

#include "sim/pipeline/collectives.h"

#include <algorithm>

namespace rlsim::sim {

models::Link group_link(int group, int devices_per_node, const models::Link& intra, const models::Link& inter) {
  return group <= devices_per_node ? intra : inter;
}

double all_gather_s(double bytes, int n, const models::Link& link, double eff) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return (n - 1) * (bytes / n) / (link.bandwidth_bytes_per_s * eff) + (n - 1) * link.latency_s;
}

double reduce_scatter_s(double bytes, int n, const models::Link& link, double eff) { return all_gather_s(bytes, n, link, eff); }

double all_reduce_s(double bytes, int n, const models::Link& link, double eff) {
  return reduce_scatter_s(bytes, n, link, eff) + all_gather_s(bytes, n, link, eff);
}

double hierarchical_all_reduce_s(double bytes, int n, int per_node, const models::Link& intra, const models::Link& inter,
                                 double eff) {
  if (n <= per_node || per_node <= 1) return all_reduce_s(bytes, n, n <= per_node ? intra : inter, eff);
  const int nodes = (n + per_node - 1) / per_node;
  return reduce_scatter_s(bytes, per_node, intra, eff) + all_reduce_s(bytes / per_node, nodes, inter, eff) +
         all_gather_s(bytes, per_node, intra, eff);
}

double broadcast_s(double bytes, int n, const models::Link& link, double eff) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return bytes / (link.bandwidth_bytes_per_s * eff) + (n - 1) * link.latency_s;
}

double all_to_all_s(double bytes, int n, const models::Link& link, double eff) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return (n - 1) * (bytes / n) / (link.bandwidth_bytes_per_s * eff) + (n - 1) * link.latency_s;
}

double expert_all_to_all_s(double bytes, int n, int per_node, const models::Link& intra, const models::Link& inter, double eff) {
  if (n <= 1 || bytes <= 0) return 0.0;
  const int local = std::max(1, std::min(n, per_node));
  const double intra_s = bytes * (local - 1) / n / (intra.bandwidth_bytes_per_s * eff);
  if (n <= local) return intra_s + 2 * intra.latency_s;
  const double inter_s = bytes * (n - local) / n / (inter.bandwidth_bytes_per_s * eff);
  return std::max(intra_s, inter_s) + 2 * inter.latency_s;
}

}  // namespace rlsim::sim

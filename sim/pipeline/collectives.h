// Collective-communication cost: ring formulas (Patarasuk & Yuan 2009, "Bandwidth optimal
// all-reduce algorithms for clusters of workstations"; NCCL's performance notes use the same
// (n-1)/n bus-bandwidth factor). Each of n ranks sends over its own link of bandwidth B (bytes/s,
// one direction) with latency a (s) per step; eff is the achieved fraction of B.
#pragma once

#include "models/hardware/device.h"

namespace rlsim::sim {

/// The link a group of `group` devices communicates over when devices are packed onto nodes of
/// `devices_per_node`: the intra-node link when the group fits in a node, else the inter-node
/// link (a ring that crosses nodes is limited by its slowest hop).
models::Link group_link(int group, int devices_per_node, const models::Link& intra, const models::Link& inter);

/// Ring all-gather producing `bytes` in total on every rank (each contributes bytes/n):
/// (n-1) * (bytes/n) / (B eff) + (n-1) a. Zero for n <= 1. Seconds.
double all_gather_s(double bytes, int n, const models::Link& link, double eff);

/// Ring reduce-scatter of a `bytes` input on every rank: same cost as all_gather_s.
double reduce_scatter_s(double bytes, int n, const models::Link& link, double eff);

/// Ring all-reduce of `bytes` on every rank = reduce-scatter + all-gather:
/// 2 (n-1)/n * bytes / (B eff) + 2 (n-1) a.
double all_reduce_s(double bytes, int n, const models::Link& link, double eff);

/// All-reduce of `bytes` over n ranks packed onto nodes of `per_node` devices, as NCCL and
/// Horovod's hierarchical all-reduce run it across nodes (Sergeev & Del Balso 2018, "Horovod",
/// sec. 4; NCCL's multi-node rings leave a node once per rail): reduce-scatter inside each node
/// over `intra`, all-reduce of the bytes/per_node shard across the ceil(n / per_node) nodes over
/// `inter` (every device has its own NIC, so the rails run in parallel), all-gather inside the
/// node. Equal to all_reduce_s over `intra` when the group fits one node. Seconds.
double hierarchical_all_reduce_s(double bytes, int n, int per_node, const models::Link& intra, const models::Link& inter,
                                 double eff);

/// Pipelined (chunked ring/chain) broadcast of `bytes` from one rank to n-1 others:
/// bytes / (B eff) + (n-1) a (large-message limit). Zero for n <= 1.
double broadcast_s(double bytes, int n, const models::Link& link, double eff);

/// All-to-all (MoE dispatch / combine) where each of n ranks sends `bytes` in total, spread
/// evenly over all n ranks (its own share stays local): (n-1)/n * bytes / (B eff) + (n-1) a
/// (pairwise exchange, n-1 rounds; the model of DeepEP / NCCL all-to-all at large messages).
/// Zero for n <= 1.
double all_to_all_s(double bytes, int n, const models::Link& link, double eff);

/// Expert-parallel all-to-all over n ranks spanning nodes of `per_node` devices (wide EP: MoE
/// dispatch or combine across the whole engine), each rank sending `bytes` spread evenly over the
/// n ranks, every pair at once (DeepEP's kernels write straight into the peers' buffers, no
/// rounds): the intra-node share (min(n, per_node) - 1) / n over `intra` and the inter-node share
/// (n - per_node) / n over `inter` concurrently, the slower of the two plus a send and a completion
/// signal (2 latencies) of the slower link. Against DeepEP's published low-latency kernels (H800,
/// CX7 400 Gb/s, 128 tokens x top-8 x 7168, FP8 dispatch / BF16 combine, EP 16-256) within 25 %
/// at the default comm efficiency (tests/sim/pipeline/rollout_test.cc). Zero for n <= 1.
double expert_all_to_all_s(double bytes, int n, int per_node, const models::Link& intra, const models::Link& inter, double eff);

}  // namespace rlsim::sim

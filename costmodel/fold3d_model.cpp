#include "costmodel/fold3d_model.h"

#include <algorithm>
#include <set>

#include "costmodel/memory.h"
#include "costmodel/topology.h"

namespace stagecraft::costmodel::fold3d {

double bubble_s(double comp_s, int p, int ns, int ms) { return (p - 1) * comp_s / (static_cast<double>(ns) * ms); }

double dp_comm_s(double host_grad_bytes, int d_inter, double host_Bps) {
  return 2.0 * (d_inter - 1) * host_grad_bytes / (d_inter * host_Bps);
}

double pp_comm_s(int transfers, double message_bytes, int d_inter, double host_Bps) {
  return transfers * message_bytes / (d_inter * host_Bps);
}

double overlappable_comm_s(double pp_s, double dp_s, int ns, int ms) {
  return (ms - 1.0) / ms * pp_s + (ns - 1.0) / ns * dp_s;
}

double exposed_comm_s(double pp_s, double dp_s, double tp_s, int ns, int ms) { return pp_s / ms + dp_s / ns + tp_s; }

double iteration_s(double comp_s, double tp_s, double pp_s, double dp_s, int p, int ns, int ms) {
  return std::max(comp_s, overlappable_comm_s(pp_s, dp_s, ns, ms)) + exposed_comm_s(pp_s, dp_s, tp_s, ns, ms) +
         bubble_s(comp_s, p, ns, ms);
}

double conventional_iteration_s(double comp_s, double tp_s, double pp_s, double dp_s, int p, int ms) {
  return comp_s + (tp_s + pp_s + dp_s) + bubble_s(comp_s, p, 1, ms);
}

double megatron_checkpoints(int p, int ns) { return p * (ns + 1.0) - 1.0; }

double aiao_checkpoints(int ms, int ns) { return static_cast<double>(ms) * ns; }

namespace {

// Tensor-parallel collective time the rank's compute actions do not hide.
double tp_exposed_s(const Estimate& e, int rank) {
  double t = 0;
  for (const schedules::Action& a : e.schedule.actions[static_cast<size_t>(rank)]) {
    if (a.stage < 0) continue;
    const StageCost& sc = e.costs.stages[static_cast<size_t>(a.stage)];
    switch (a.op) {
      case schedules::Op::F: t += sc.tp_exposed_f_s; break;
      case schedules::Op::R: t += a.fraction * sc.tp_exposed_f_s; break;
      case schedules::Op::B:
      case schedules::Op::I: t += sc.tp_exposed_b_s; break;
      case schedules::Op::OVERLAP_F_B: t += sc.tp_exposed_f_s + e.costs.stages[static_cast<size_t>(a.b_stage)].tp_exposed_b_s; break;
      default: break;
    }
  }
  return t;
}

// w: the gradient bytes of every GPU on the fullest host the plan uses.
double host_grad_bytes(const Estimate& e, const Topology& topo) {
  const int gpus = e.plan.num_gpus(), per_node = e.cluster.gpus_per_node;
  double most = 0;
  for (int first = 0; first < gpus; first += per_node) {
    double w = 0;
    for (int g = first; g < std::min(gpus, first + per_node); ++g)
      w += e.costs.params[static_cast<size_t>(topo.coords(g).pp)] * grad_bytes_per_param(e.model);
    most = std::max(most, w);
  }
  return most;
}

// d_inter: the hosts one data-parallel group spans.
int dp_hosts(const Estimate& e, const Topology& topo) {
  std::set<int> nodes;
  for (int i = 0; i < e.plan.dp; ++i) nodes.insert(topo.node_of(topo.global_rank({0, i, 0})));
  return static_cast<int>(nodes.size());
}

int segments_of(const ParallelPlan& p) {
  auto it = p.schedule_params.find("segments");
  return it != p.schedule_params.end() && it->is_number_integer() ? it->get<int>() : 1;
}

}  // namespace

Model model_of(const Estimate& e) {
  Model r;
  r.p = e.plan.pp;
  r.ns = segments_of(e.plan);
  r.ms = e.plan.num_microbatches;
  const auto& comp = e.eval.compute_s;
  r.rank = static_cast<int>(std::max_element(comp.begin(), comp.end()) - comp.begin());
  r.optimizer_s = e.costs.optimizer_s.empty() ? 0 : e.costs.optimizer_s[static_cast<size_t>(r.rank)];
  r.tp_comm_s = tp_exposed_s(e, r.rank);
  r.comp_s = comp[static_cast<size_t>(r.rank)] - r.optimizer_s - r.tp_comm_s;
  const Topology topo(e.cluster, e.plan);
  r.d_inter = dp_hosts(e, topo);
  r.host_grad_bytes = host_grad_bytes(e, topo);
  r.host_Bps = e.cluster.nics_per_node * e.cluster.inter_node_achieved_Bps();
  r.message_bytes = memory::boundary_message_bytes(e.model, e.plan.microbatch_size, e.plan.tp, e.plan.sequence_parallel);
  r.transfers = 2 * r.ms * r.ns;
  r.dp_comm_s = dp_comm_s(r.host_grad_bytes, r.d_inter, r.host_Bps);
  r.pp_comm_s = pp_comm_s(r.transfers, r.message_bytes, r.d_inter, r.host_Bps);
  r.bubble_s = bubble_s(r.comp_s, r.p, r.ns, r.ms);
  r.overlappable_s = overlappable_comm_s(r.pp_comm_s, r.dp_comm_s, r.ns, r.ms);
  r.unhidden_s = std::max(0.0, r.overlappable_s - r.comp_s);
  r.exposed_s = exposed_comm_s(r.pp_comm_s, r.dp_comm_s, r.tp_comm_s, r.ns, r.ms);
  r.iteration_s = iteration_s(r.comp_s, r.tp_comm_s, r.pp_comm_s, r.dp_comm_s, r.p, r.ns, r.ms);
  const double pp_one = pp_comm_s(2 * r.ms, r.message_bytes, r.d_inter, r.host_Bps);
  r.megatron_iteration_s = conventional_iteration_s(r.comp_s, r.tp_comm_s, pp_one, r.dp_comm_s, r.p, r.ms);
  return r;
}

int paper_segments(const Model& m, int max_ns) {
  auto fits = [&](int ns) {
    const double pp = pp_comm_s(2 * m.ms * ns, m.message_bytes, m.d_inter, m.host_Bps);
    return overlappable_comm_s(pp, m.dp_comm_s, ns, m.ms) <= m.comp_s;
  };
  int ns = 1;
  while (ns < max_ns && fits(ns + 1)) ++ns;
  return ns;
}

nlohmann::json to_json(const Model& m, int paper_ns) {
  return {{"p", m.p},
          {"segments", m.ns},
          {"microbatches", m.ms},
          {"rank", m.rank},
          {"d_inter", m.d_inter},
          {"comp_s", m.comp_s},
          {"tp_comm_s", m.tp_comm_s},
          {"host_grad_bytes", m.host_grad_bytes},
          {"host_Bps", m.host_Bps},
          {"message_bytes", m.message_bytes},
          {"transfers", m.transfers},
          {"dp_comm_s", m.dp_comm_s},
          {"pp_comm_s", m.pp_comm_s},
          {"bubble_s", m.bubble_s},
          {"overlappable_comm_s", m.overlappable_s},
          {"unhidden_comm_s", m.unhidden_s},
          {"exposed_comm_s", m.exposed_s},
          {"iteration_s", m.iteration_s},
          {"optimizer_s", m.optimizer_s},
          {"megatron_iteration_s", m.megatron_iteration_s},
          {"paper_segments", paper_ns}};
}

}  // namespace stagecraft::costmodel::fold3d

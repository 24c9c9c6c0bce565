#include "costmodel/pipeline_split.h"

#include <string>
#include <vector>

#include "schedules/error.h"

namespace stagecraft::costmodel {
namespace {

constexpr size_t kMaxExpanded = 1000000;  // characters of an unrolled layout: far above any model's

InputError bad_layout(const std::string& text, const std::string& why) {
  return InputError("plan.pipeline_layout = '" + text + "' is invalid: " + why +
                    " (allowed: Megatron-Core's layout, e.g. Et*3|(tt|)*29m|L: one entry per stage, '|' between, E the "
                    "embedding, t a transformer layer, m a multi-token prediction layer, L the loss)");
}

// The count after a '*' at s[at]; `end` is set past its digits.
size_t repeat_count(const std::string& s, size_t at, size_t& end, const std::string& text) {
  if (at >= s.size() || s[at] != '*') throw bad_layout(text, "a group in parentheses must be followed by *n");
  end = at + 1;
  size_t n = 0;
  while (end < s.size() && s[end] >= '0' && s[end] <= '9') {
    n = n * 10 + static_cast<size_t>(s[end] - '0');
    if (n > kMaxExpanded) throw bad_layout(text, "a repeat count above " + std::to_string(kMaxExpanded));
    ++end;
  }
  if (end == at + 1) throw bad_layout(text, "'*' must be followed by a count");
  return n;
}

std::string append_repeated(std::string out, const std::string& unit, size_t n, const std::string& text) {
  if (out.size() + unit.size() * n > kMaxExpanded) throw bad_layout(text, "it unrolls to more than " + std::to_string(kMaxExpanded) + " characters");
  for (size_t k = 0; k < n; ++k) out += unit;
  return out;
}

// "(...)*n" unrolled (not nested), then "x*n", commas dropped: Megatron-Core's parse_str_to_list.
std::string unroll(const std::string& text) {
  std::string s, groups;
  for (char c : text)
    if (c != ',') s += c;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == ')') throw bad_layout(text, "a ')' without its '('");
    if (s[i] != '(') { groups += s[i++]; continue; }
    const size_t close = s.find(')', i);
    if (close == std::string::npos) throw bad_layout(text, "a '(' without its ')'");
    if (s.find('(', i + 1) < close) throw bad_layout(text, "nested parentheses");
    if (close == i + 1) throw bad_layout(text, "an empty group '()'");
    size_t end = 0;
    const size_t n = repeat_count(s, close + 1, end, text);
    groups = append_repeated(groups, s.substr(i + 1, close - i - 1), n, text);
    i = end;
  }
  std::string out;
  for (size_t i = 0; i < groups.size();) {
    if (groups[i] == '*') throw bad_layout(text, "a '*' with nothing before it");
    if (i + 1 < groups.size() && groups[i + 1] == '*') {
      size_t end = 0;
      out = append_repeated(out, std::string(1, groups[i]), repeat_count(groups, i + 1, end, text), text);
      i = end;
    } else {
      out += groups[i++];
    }
  }
  return out;
}

struct StageEntry {
  int layers = 0, mtp = 0, embedding = 0, loss = 0;
  bool layer_after_mtp = false;
};

std::vector<StageEntry> entries(const std::string& unrolled, const std::string& text) {
  std::vector<StageEntry> out(1);
  for (char c : unrolled) {
    StageEntry& e = out.back();
    switch (c) {
      case '|': out.emplace_back(); break;
      case 't': e.layers += 1; e.layer_after_mtp = e.layer_after_mtp || e.mtp > 0; break;
      case 'm': e.mtp += 1; break;
      case 'E': e.embedding += 1; break;
      case 'L': e.loss += 1; break;
      default: throw bad_layout(text, std::string("the character '") + c + "'");
    }
  }
  return out;
}

}  // namespace

LayoutSplit parse_layout(const std::string& text, const ModelSpec& m, int stages) {
  const std::string unrolled = unroll(text);
  const std::vector<StageEntry> e = entries(unrolled, text);
  const size_t S = e.size();
  if (static_cast<int>(S) != stages)
    throw bad_layout(text, "it has " + std::to_string(S) + " stages; the schedule has " + std::to_string(stages) + " per pipeline (pp x chunks)");
  if (unrolled.front() != 'E' || unrolled.back() != 'L')
    throw bad_layout(text, "it must begin with the embedding E and end with the loss L");
  LayoutSplit out;
  int layers = 0, mtp = 0;
  for (size_t i = 0; i < S; ++i) {
    if ((i > 0 && e[i].embedding > 0) || (i + 1 < S && e[i].loss > 0) || e[i].embedding > 1 || e[i].loss > 1)
      throw bad_layout(text, "E and L appear once each, E on the first stage and L on the last");
    if (e[i].mtp > 0 && out.mtp_stage >= 0) throw bad_layout(text, "all multi-token prediction layers sit on one stage");
    if (e[i].layer_after_mtp || (mtp > 0 && e[i].layers > 0))
      throw bad_layout(text, "transformer layers come before the multi-token prediction layers");
    if (e[i].layers == 0 && e[i].mtp == 0 && i > 0 && i + 1 < S)
      throw bad_layout(text, "stage " + std::to_string(i) + " holds no layer (only the first and last stages may)");
    if (e[i].mtp > 0) out.mtp_stage = static_cast<int>(i);
    layers += e[i].layers;
    mtp += e[i].mtp;
    out.layers.push_back(e[i].layers);
  }
  if (layers != m.num_layers)
    throw bad_layout(text, "it has " + std::to_string(layers) + " transformer layers; model '" + m.name + "' has " + std::to_string(m.num_layers));
  if (mtp != m.mtp_layers)
    throw bad_layout(text, "it has " + std::to_string(mtp) + " multi-token prediction layers; model '" + m.name + "' has " +
                               std::to_string(m.mtp_layers) + " (mtp_layers)");
  return out;
}

std::vector<int> layout_stage_layers(const std::string& text, const ModelSpec& m, int stages) {
  return parse_layout(text, m, stages).layers;
}

int layout_stage_count(const std::string& text) { return static_cast<int>(entries(unroll(text), text).size()); }

int mtp_model_part(const ModelSpec& m, const ParallelPlan& p, int stages) {
  if (m.mtp_layers <= 0) return -1;
  if (p.pipeline_layout.empty()) return stages - 1;
  return parse_layout(p.pipeline_layout, m, stages).mtp_stage;
}

std::vector<int> accounted_stage_layers(const ModelSpec& m, int stages, bool embedding, bool loss) {
  const int total = m.num_layers + (embedding ? 1 : 0) + (loss ? 1 : 0);
  const std::string what = std::string(embedding ? "plan.account_for_embedding_in_pipeline_split" : "") +
                           (embedding && loss ? " and " : "") + (loss ? "plan.account_for_loss_in_pipeline_split" : "");
  if (total % stages != 0)
    throw InputError(what + " = true: model '" + m.name + "' has " + std::to_string(m.num_layers) + " layers, " +
                     std::to_string(total) + " with the embedding and loss counted, not a multiple of the schedule's " +
                     std::to_string(stages) + " stages per pipeline (allowed: as Megatron-Core, a multiple of pp x chunks)");
  std::vector<int> out(static_cast<size_t>(stages), total / stages);
  if (embedding) out.front() -= 1;
  if (loss) out.back() -= 1;
  if (out.front() < 0 || out.back() < 0 || (stages == 1 && out.front() < 1))
    throw InputError(what + " = true: model '" + m.name + "' has too few layers for " + std::to_string(stages) + " stages");
  return out;
}

std::vector<int> uneven_stage_layers(const ModelSpec& m, int pp, int chunks, int first, int last) {
  const std::string what = "--decoder-first/last-pipeline-num-layers (" + std::to_string(first) + ", " + std::to_string(last) + ")";
  std::vector<int> rank(static_cast<size_t>(pp), 0);
  int rest = m.num_layers, others = pp;
  if (first >= 0) rest -= first, --others;
  if (last >= 0 && pp > 1) rest -= last, --others;
  if (rest < 0 || (others > 0 && rest % others != 0) || (others == 0 && rest != 0))
    throw InputError(what + ": model '" + m.name + "' has " + std::to_string(m.num_layers) + " layers; the other " +
                     std::to_string(others) + " pipeline ranks get " + std::to_string(rest) +
                     " (allowed: as Megatron-Core, a multiple of those ranks)");
  for (int r = 0; r < pp; ++r) rank[static_cast<size_t>(r)] = others > 0 ? rest / others : 0;
  if (first >= 0) rank.front() = first;
  if (last >= 0 && pp > 1) rank.back() = last;
  std::vector<int> out(static_cast<size_t>(pp * chunks), 0);
  for (int r = 0; r < pp; ++r) {
    if (rank[static_cast<size_t>(r)] % chunks != 0)
      throw InputError(what + ": pipeline rank " + std::to_string(r) + " holds " + std::to_string(rank[static_cast<size_t>(r)]) +
                       " layers, not a multiple of its " + std::to_string(chunks) + " virtual stages (allowed: as Megatron-Core)");
    for (int v = 0; v < chunks; ++v) out[static_cast<size_t>(v * pp + r)] = rank[static_cast<size_t>(r)] / chunks;
  }
  return out;
}

std::string layout_of(const std::vector<int>& stage_layers, int mtp_layers) {
  const auto layers = [](int n) { return n == 0 ? std::string() : n == 1 ? std::string("t") : "t*" + std::to_string(n); };
  const size_t S = stage_layers.size();
  const std::string tail = (mtp_layers > 1 ? "m*" + std::to_string(mtp_layers) : mtp_layers == 1 ? "m" : "") + "L";
  if (S == 1) return "E" + layers(stage_layers[0]) + tail;
  std::string out = "E" + layers(stage_layers[0]) + "|";
  for (size_t i = 1; i + 1 < S;) {
    size_t run = 1;
    while (i + run + 1 < S && stage_layers[i + run] == stage_layers[i]) ++run;
    out += run > 1 ? "(" + layers(stage_layers[i]) + "|)*" + std::to_string(run) : layers(stage_layers[i]) + "|";
    i += run;
  }
  return out + layers(stage_layers[S - 1]) + tail;
}

}  // namespace stagecraft::costmodel

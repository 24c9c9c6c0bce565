#include "schedules/action.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "schedules/error.h"

namespace stagecraft::schedules {
namespace {

constexpr std::array<std::string_view, kNumOps> kOpNames = {
    "F",      "B",      "I",           "W",       "R",      "SEND_F",    "RECV_F",
    "SEND_B", "RECV_B", "REDUCE_GRAD", "OFFLOAD", "RELOAD", "OPTIMIZER", "OVERLAP_F_B", "UNSHARD", "RESHARD"};

std::string allowed_ops() {
  std::string s;
  for (auto n : kOpNames) {
    if (!s.empty()) s += ", ";
    s += n;
  }
  return s;
}

[[noreturn]] void bad_token(std::string_view text, const std::string& why) {
  throw InputError("action '" + std::string(text) + "': " + why +
                   " (grammar: <stage><op><microbatch>[key=value,...], e.g. 2F0, 1SEND_F3, "
                   "(0F7;7B3)OVERLAP_F_B, 0REDUCE_GRAD[frac=0.5]; ops: " +
                   allowed_ops() + ")");
}

int parse_int(std::string_view text, std::string_view digits, const char* what) {
  if (digits.empty() || digits.size() > 9) bad_token(text, std::string("expected a ") + what);
  int v = 0;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) bad_token(text, std::string("bad ") + what);
    v = v * 10 + (c - '0');
  }
  return v;
}

// "<stage><op><mb>" without suffix or parentheses.
Action parse_simple(std::string_view full, std::string_view t) {
  size_t i = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
  size_t j = i;
  while (j < t.size() && (std::isupper(static_cast<unsigned char>(t[j])) || t[j] == '_')) ++j;
  if (j == i) bad_token(full, "missing op");
  if (j != t.size() &&
      !std::all_of(t.begin() + j, t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    bad_token(full, "unexpected characters after the op");
  Action a;
  a.op = parse_op(t.substr(i, j - i));
  if (i > 0) a.stage = parse_int(full, t.substr(0, i), "stage");
  if (j < t.size()) a.microbatch = parse_int(full, t.substr(j), "microbatch");
  if (a.op != Op::OPTIMIZER && a.stage < 0) bad_token(full, "missing stage");
  if (needs_microbatch(a.op) && a.microbatch < 0) bad_token(full, "missing microbatch");
  if (!needs_microbatch(a.op) && a.microbatch >= 0)
    bad_token(full, "op takes no microbatch");
  return a;
}

void parse_suffix(std::string_view full, std::string_view body, Action& a) {
  // body: "k=v,k=v"
  size_t pos = 0;
  while (pos < body.size()) {
    size_t comma = body.find(',', pos);
    if (comma == std::string_view::npos) comma = body.size();
    std::string_view kv = body.substr(pos, comma - pos);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) bad_token(full, "suffix entry without '='");
    std::string_view k = kv.substr(0, eq);
    std::string v(kv.substr(eq + 1));
    if (k == "sb") {
      a.sub_batch = parse_int(full, v, "sub-batch");
    } else if (k == "seg") {
      a.segment = parse_int(full, v, "segment");
    } else if (k == "peer") {
      a.peer = parse_int(full, v, "peer stage");
    } else if (k == "frac") {
      char* end = nullptr;
      a.fraction = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(a.fraction > 0 && a.fraction <= 1))
        bad_token(full, "frac must be a number in (0, 1]");
    } else if (k == "early") {
      char* end = nullptr;
      a.early = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(a.early >= 0 && a.early < 1))
        bad_token(full, "early must be a number in [0, 1)");
    } else {
      bad_token(full, "unknown suffix key '" + std::string(k) + "' (allowed: sb, seg, frac, early, peer)");
    }
    pos = comma + 1;
  }
}

}  // namespace

std::string_view op_name(Op op) { return kOpNames[static_cast<size_t>(op)]; }

Op parse_op(std::string_view name) {
  for (size_t i = 0; i < kOpNames.size(); ++i)
    if (kOpNames[i] == name) return static_cast<Op>(i);
  if (name == "BW") return Op::B;  // PyTorch's legacy name for a full backward
  throw InputError("unknown op '" + std::string(name) + "' (allowed: " + allowed_ops() + ", BW)");
}

bool is_compute(Op op) {
  switch (op) {
    case Op::F: case Op::B: case Op::I: case Op::W: case Op::R: case Op::OVERLAP_F_B:
    case Op::OPTIMIZER:
      return true;
    default:
      return false;
  }
}

bool is_backward(Op op) { return op == Op::B || op == Op::I; }

bool is_p2p(Op op) {
  return op == Op::SEND_F || op == Op::RECV_F || op == Op::SEND_B || op == Op::RECV_B;
}

bool needs_microbatch(Op op) { return op != Op::REDUCE_GRAD && op != Op::OPTIMIZER && !is_fsdp(op); }

bool is_fsdp(Op op) { return op == Op::UNSHARD || op == Op::RESHARD; }

bool operator==(const Action& a, const Action& b) {
  return a.stage == b.stage && a.op == b.op && a.microbatch == b.microbatch &&
         a.sub_batch == b.sub_batch && a.segment == b.segment && a.fraction == b.fraction && a.early == b.early &&
         a.peer == b.peer && a.b_stage == b.b_stage && a.b_op == b.b_op &&
         a.b_microbatch == b.b_microbatch;
}

std::string to_text(const Action& a) {
  std::string s;
  auto simple = [](int stage, Op op, int mb) {
    std::string t;
    if (stage >= 0) t += std::to_string(stage);
    t += op_name(op);
    if (mb >= 0) t += std::to_string(mb);
    return t;
  };
  if (a.op == Op::OVERLAP_F_B) {
    s = "(" + simple(a.stage, Op::F, a.microbatch) + ";" + simple(a.b_stage, a.b_op, a.b_microbatch) +
        ")OVERLAP_F_B";
  } else {
    s = simple(a.stage, a.op, a.microbatch);
  }
  std::string suffix;
  auto add = [&](const std::string& kv) { suffix += (suffix.empty() ? "" : ",") + kv; };
  if (a.sub_batch >= 0) add("sb=" + std::to_string(a.sub_batch));
  if (a.segment >= 0) add("seg=" + std::to_string(a.segment));
  if (a.fraction != 1) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", a.fraction);
    add(std::string("frac=") + buf);
  }
  if (a.early != 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", a.early);
    add(std::string("early=") + buf);
  }
  if (a.peer >= 0) add("peer=" + std::to_string(a.peer));
  if (!suffix.empty()) s += "[" + suffix + "]";
  return s;
}

Action parse_action(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  if (t.empty()) bad_token(text, "empty action");
  std::string_view suffix;
  if (t.back() == ']') {
    size_t open = t.rfind('[');
    if (open == std::string_view::npos) bad_token(text, "unbalanced ']'");
    suffix = t.substr(open + 1, t.size() - open - 2);
    t = t.substr(0, open);
  }
  Action a;
  if (t.front() == '(') {
    size_t close = t.find(')');
    if (close == std::string_view::npos) bad_token(text, "unbalanced '('");
    if (t.substr(close + 1) != "OVERLAP_F_B") bad_token(text, "a parenthesised pair must end in OVERLAP_F_B");
    std::string_view inner = t.substr(1, close - 1);
    size_t semi = inner.find(';');
    if (semi == std::string_view::npos) bad_token(text, "OVERLAP_F_B needs two actions separated by ';'");
    Action f = parse_simple(text, inner.substr(0, semi));
    Action b = parse_simple(text, inner.substr(semi + 1));
    if (f.op != Op::F) bad_token(text, "the first action of OVERLAP_F_B must be a forward");
    if (b.op != Op::B && b.op != Op::I) bad_token(text, "the second action of OVERLAP_F_B must be B or I");
    a = Action::overlap(f.stage, f.microbatch, b.stage, b.microbatch, b.op);
  } else {
    a = parse_simple(text, t);
  }
  if (!suffix.empty()) parse_suffix(text, suffix, a);
  return a;
}

}  // namespace stagecraft::schedules

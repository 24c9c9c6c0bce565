// The text form of actions: PyTorch's notation plus stagecraft's bracketed suffix.
#include <gtest/gtest.h>

#include "schedules/action.h"
#include "schedules/error.h"

using namespace stagecraft;
using namespace stagecraft::schedules;

TEST(ActionText, PyTorchNotationRoundTrips) {
  for (const char* t : {"2F0", "1SEND_F3", "1RECV_F3", "3SEND_B12", "0RECV_B7", "5B4", "5I4", "5W4", "2R1",
                        "0REDUCE_GRAD", "OPTIMIZER", "(0F7;7B3)OVERLAP_F_B", "(1F6;6I2)OVERLAP_F_B", "4OFFLOAD3", "4RELOAD3"}) {
    Action a = parse_action(t);
    EXPECT_EQ(to_text(a), t);
  }
}

TEST(ActionText, FieldsAreParsed) {
  Action a = parse_action("12SEND_B34");
  EXPECT_EQ(a.stage, 12);
  EXPECT_EQ(a.op, Op::SEND_B);
  EXPECT_EQ(a.microbatch, 34);
  Action o = parse_action("(0F7;7B3)OVERLAP_F_B");
  EXPECT_EQ(o.op, Op::OVERLAP_F_B);
  EXPECT_EQ(o.stage, 0);
  EXPECT_EQ(o.microbatch, 7);
  EXPECT_EQ(o.b_stage, 7);
  EXPECT_EQ(o.b_microbatch, 3);
  EXPECT_EQ(o.b_op, Op::B);
}

TEST(ActionText, SuffixCarriesExtraFields) {
  Action a = parse_action("3REDUCE_GRAD[frac=0.25,seg=1]");
  EXPECT_EQ(a.op, Op::REDUCE_GRAD);
  EXPECT_DOUBLE_EQ(a.fraction, 0.25);
  EXPECT_EQ(a.segment, 1);
  EXPECT_EQ(to_text(a), "3REDUCE_GRAD[seg=1,frac=0.25]");
  Action b = parse_action("2F1[sb=1,peer=3]");
  EXPECT_EQ(b.sub_batch, 1);
  EXPECT_EQ(b.peer, 3);
  EXPECT_EQ(parse_action(to_text(b)), b);
}

TEST(ActionText, LegacyFullBackwardBW) { EXPECT_EQ(parse_action("3BW2").op, Op::B); }

TEST(ActionText, BadTokensNameTheProblem) {
  auto msg = [](const char* t) {
    try {
      parse_action(t);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("2X0").find("unknown op 'X'"), std::string::npos);
  EXPECT_NE(msg("F0").find("missing stage"), std::string::npos);
  EXPECT_NE(msg("2F").find("missing microbatch"), std::string::npos);
  EXPECT_NE(msg("0REDUCE_GRAD3").find("takes no microbatch"), std::string::npos);
  EXPECT_NE(msg("(0B1;1F0)OVERLAP_F_B").find("must be a forward"), std::string::npos);
  EXPECT_NE(msg("1F0[frac=2]").find("(0, 1]"), std::string::npos);
  EXPECT_NE(msg("1F0[zz=1]").find("unknown suffix key"), std::string::npos);
  EXPECT_NE(msg("").find("empty"), std::string::npos);
}

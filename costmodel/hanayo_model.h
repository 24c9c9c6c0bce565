// Hanayo's closed-form bubble model (Zhou et al., Hanayo, SC 2023, Sec. 3.4, eq. (1)), as a
// cross-check of the wave schedule (schedules/generators/waves.cpp). Symbols as the paper's
// Table 1: P devices, W waves, T_F and T_B a whole forward and backward pass of one microbatch
// divided by P (so one device's share), T_C one point-to-point transfer; B = P microbatches.
//
// Read term by term, eq. (1) is (idle / (P-1)) / (makespan' / (P-1)) with
//   idle      = (P-1) T_B / W + (P-1)(1 + 2W + 2/P + (P-2)/3) T_C        (the numerator)
//   makespan' = P (T_F + T_B) + (P-1) T_B / (2W) + (P-1)((P-2)/2 + 4W) T_C
// With T_C = 0 the idle time is each device's (the schedule's makespan less its P (T_F + T_B)
// of work), but the denominator adds only half of it to the work: eq. (1) is idle / (work +
// idle / 2), not idle / makespan. Both are here; tests/test_hanayo_waves.cpp checks the idle
// time against the constructed schedule and the printed simplification (2P-2)/(3PW+P-1).
#pragma once

namespace stagecraft::costmodel::hanayo {

// Eq. (1) as printed: the bubble ratio for P devices, W waves, per-device pass times.
double bubble_ratio_eq1(int P, int W, double tf_s, double tb_s, double tc_s);
// Eq. (1)'s simplification for T_B = 2 T_F and T_C = 0: (2P-2) / (3PW + P-1).
double bubble_ratio_simplified(int P, int W);
// The idle time of each device that eq. (1)'s numerator counts, times P-1:
// (P-1) T_B / W + (P-1)(1 + 2W + 2/P + (P-2)/3) T_C.
double idle_s(int P, int W, double tb_s, double tc_s);

}  // namespace stagecraft::costmodel::hanayo

// Numbers from Qi, Wan, Huang, Lin: "Zero Bubble Pipeline Parallelism", ICLR 2024
// (arXiv:2401.10241), copied exactly:
//
//  * Table 9 (Appendix D, "Profiled time of T_F, T_B, T_W, and T_comm"): the per-pass times (the
//    paper gives no unit; they are milliseconds-scale measurements on A100s) recorded in ZB-2p runs,
//    "used to calculate bubble rates for all the methods considered in Section 5.3 and 5.4";
//  * Table 5 (Section 5.3, "Bubble rates of 1F1B, 1F1B-I, ZB-H1, ZB-H2, ZB-1p, ZB-2p under different
//    settings"): bubble rate = (cost - m(T_F + T_B + T_W)) / cost, where cost is "the largest
//    execution time of all stages, calculated for each schedule using profiled T_F, T_B, T_W and
//    T_comm";
//  * Table 3 (Section 5.1, "Models and fixed settings used in experiments"): hidden size h, attention
//    heads a and sequence length s, which with Table 1 (Section 2.3: activation memory per layer for B
//    is sb(34h + 5as), for W 32sbh) give the ratio M_W / M_B = 32h / (34h + 5as).
#pragma once

namespace pf::sched::paper {

struct ZeroBubbleSetting {
  const char* model;
  int p;  // #Stage
  int m;  // #Microbatch
  // Table 9.
  double t_f, t_b, t_w, t_comm;
  // Table 5.
  double bubble_1f1b, bubble_1f1b_i, bubble_zb_h1, bubble_zb_h2, bubble_zb_1p, bubble_zb_2p;
  // Table 3: h, a, s.
  int hidden, heads, seq_len;
};

inline constexpr ZeroBubbleSetting kZeroBubbleSettings[] = {
    // model    p   m      T_F     T_B     T_W  T_comm    1F1B  1F1B-I   ZB-H1   ZB-H2   ZB-1p   ZB-2p     h   a     s
    {"1.5B",    8,  24, 18.522, 18.086,  9.337, 0.601, 0.2431, 0.1055, 0.1585, 0.1083, 0.1585, 0.0433, 2304, 24, 1024},
    {"1.5B",    8,  32, 18.513, 18.086,  9.331, 0.626, 0.1985, 0.0818, 0.1242, 0.0837, 0.1242, 0.0039, 2304, 24, 1024},
    {"1.5B",    8,  64, 18.546, 18.097,  9.321, 0.762, 0.1240, 0.0443, 0.0674, 0.0444, 0.0674, 0.0026, 2304, 24, 1024},
    {"6.2B",    8,  24, 29.718, 29.444, 19.927, 0.527, 0.2347, 0.0808, 0.1323, 0.0698, 0.1323, 0.0029, 4096, 32, 1024},
    {"6.2B",    8,  32, 29.802, 29.428, 19.530, 0.577, 0.1898, 0.0628, 0.1045, 0.0559, 0.1045, 0.0022, 4096, 32, 1024},
    {"6.2B",    8,  64, 29.935, 29.621, 19.388, 0.535, 0.1091, 0.0320, 0.0554, 0.0294, 0.0554, 0.0010, 4096, 32, 1024},
    {"14.6B",  16,  48, 11.347, 11.248,  8.132, 0.377, 0.2552, 0.1104, 0.1397, 0.0672, 0.1397, 0.0066, 5120, 40, 1024},
    {"14.6B",  16,  64, 11.307, 11.254,  8.101, 0.379, 0.2082, 0.0852, 0.1088, 0.0516, 0.1088, 0.0054, 5120, 40, 1024},
    {"14.6B",  16, 128, 11.325, 11.308,  8.109, 0.378, 0.1251, 0.0445, 0.0576, 0.0266, 0.0576, 0.0028, 5120, 40, 1024},
    {"28.3B",  32,  96, 10.419, 10.207,  7.715, 0.408, 0.2646, 0.1493, 0.1421, 0.0641, 0.1421, 0.0038, 6144, 48, 1024},
    {"28.3B",  32, 128, 10.408, 10.204,  7.703, 0.408, 0.2168, 0.1164, 0.1106, 0.0490, 0.1106, 0.0029, 6144, 48, 1024},
    {"28.3B",  32, 256, 10.402, 10.248,  7.698, 0.460, 0.1352, 0.0624, 0.0594, 0.0257, 0.0594, 0.0018, 6144, 48, 1024},
};

// M_W / M_B from Table 1: 32h / (34h + 5as).
inline double mw_over_mb(const ZeroBubbleSetting& s) {
  return 32.0 * s.hidden / (34.0 * s.hidden + 5.0 * s.heads * s.seq_len);
}

}  // namespace pf::sched::paper

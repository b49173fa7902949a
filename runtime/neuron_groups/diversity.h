// The neuron-group paper's diversity term (Patel, Eickenberg, Belilovsky, arXiv 2301.07635; GN-DGL's
// div_loss_calc): the auxiliary heads of one layer range's width groups are pushed to disagree on
// the classes that are wrong. For heads k = 0..H-1 with logits z_k [rows, classes]:
//   q_k = softmax(z_k / T); r_k = q_k with the target class zeroed; u_k = r_k / (sum r_k + 1e-8);
//   v_k = u_k / sqrt(sum u_k^2 + 1e-8)           (per row)
//   loss = sum over rows i and ordered pairs k != l of <v_k[i], v_l[i]> / (rows (H - 1) H)
// 0 with one head. Each head's gradient needs only the other heads' logits (forward values), so
// groups exchange logits, never gradients.
#pragma once

#include <cstdint>
#include <vector>

namespace pf::groups {

// `logits`: H pointers to [rows, classes] row-major logits; `targets`: rows class indices. Returns
// the loss; when `grad` is not null it receives d loss / d logits of head `head` ([rows, classes]).
// Fixed loop order: the same bits for the same inputs. Real is float or double.
template <typename Real>
Real diversity_loss(const std::vector<const Real*>& logits, const int32_t* targets, int64_t rows, int64_t classes,
                    Real temperature, int head, Real* grad);

}  // namespace pf::groups

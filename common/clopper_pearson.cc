#include "common/clopper_pearson.h"

#include <algorithm>
#include <boost/math/policies/policy.hpp>
#include <boost/math/special_functions/beta.hpp>

namespace nw {
namespace {

// Errors come back as values, never as exceptions (the arguments are checked above anyway).
using NoThrow = boost::math::policies::policy<
    boost::math::policies::domain_error<boost::math::policies::errno_on_error>,
    boost::math::policies::overflow_error<boost::math::policies::errno_on_error>,
    boost::math::policies::evaluation_error<boost::math::policies::errno_on_error>>;

}  // namespace

Interval ClopperPearsonInterval(double successes, double n, double confidence) {
  if (!(n > 0) || !(confidence > 0.0 && confidence < 1.0)) return {0.0, 1.0};
  const double k = std::clamp(successes, 0.0, n);
  const double half_alpha = (1.0 - confidence) / 2.0;
  Interval out{0.0, 1.0};
  if (k > 0) out.lo = boost::math::ibeta_inv(k, n - k + 1.0, half_alpha, NoThrow());
  if (k < n) out.hi = boost::math::ibeta_inv(k + 1.0, n - k, 1.0 - half_alpha, NoThrow());
  return out;
}

}  // namespace nw

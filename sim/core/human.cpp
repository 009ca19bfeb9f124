// Numbers for people (sim/core/human.hpp).
#include "sim/core/human.hpp"

#include <cmath>
#include <cstdio>

namespace bitlab {

namespace {

std::string with_unit(double v, const char* unit) {
  char buf[64];
  // %.3g would print 1000-999999 as 1e+03...; values >= 100 need no decimals.
  if (std::fabs(v) >= 100) {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, unit);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g %s", v, unit);
  }
  return buf;
}

}  // namespace

std::string human_bytes(double b) {
  if (!std::isfinite(b)) return with_unit(b, "B");
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  int k = 0;
  // Round first, so that 999 999 B reads "1.00 MB", not "1000 kB".
  while (k < 6 && std::fabs(b) >= 999.5) {
    b /= 1e3;
    ++k;
  }
  if (k == 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.0f B", b);
    return buf;
  }
  return with_unit(b, kUnits[k]);
}

std::string human_duration(double s) {
  if (!std::isfinite(s)) return with_unit(s, "s");
  char buf[64];
  if (s >= 86400) {
    std::snprintf(buf, sizeof buf, "%.2f days", s / 86400);
  } else if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%.2f h", s / 3600);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%.2f min", s / 60);
  } else if (s >= 0.9995 || s == 0) {
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  } else if (s >= 0.9995e-3) {
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  }
  return buf;
}

}  // namespace bitlab

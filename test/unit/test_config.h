// Test helper: a PlancConfig from planc.conf text that must parse.
#ifndef PLANC_TEST_UNIT_TEST_CONFIG_H_
#define PLANC_TEST_UNIT_TEST_CONFIG_H_

#include "common/config.h"

namespace planc {
inline PlancConfig conf(const char* text) { return parse_config(text, "test.conf").value(); }
}  // namespace planc

#endif  // PLANC_TEST_UNIT_TEST_CONFIG_H_

#pragma once
// A parametrized test's name from any text (a topology, a codec spec): gtest allows
// letters, digits and '_' only, so every other character becomes '_'.

#include <cctype>
#include <string>

namespace gossip {

inline std::string gtest_param_name(std::string text) {
  for (char& c : text)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return text;
}

}  // namespace gossip

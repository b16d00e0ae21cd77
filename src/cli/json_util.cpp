#include "cli/json_util.h"

#include "core/error.h"
#include "core/format.h"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

namespace zinc::cli {

using gguf::ValueType;
using gguf::ValueView;

namespace {

// float32 metadata printed as its shortest decimal form, so 1e-5f shows as 1e-05, not 9.99999974e-06.
double shortest_double(float f) { return std::stod(fmt::format("{}", f)); }

std::string escape(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  size_t n = 0;
  for (char ch : s) {
    if (n++ == max_chars) {
      out += "…";
      break;
    }
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += ch;
    }
  }
  // C1 controls and bytes that are not UTF-8 (or a sequence cut by the length limit) as escapes too.
  return terminal_safe(out + "\"");
}

}  // namespace

nlohmann::json value_to_json(const ValueView& v, size_t max_elements, bool* truncated) {
  switch (v.type()) {
    case ValueType::BOOL: return *v.as<bool>();
    case ValueType::FLOAT32: return shortest_double(*v.as<float>());
    case ValueType::FLOAT64: return *v.as<double>();
    case ValueType::UINT64: return *v.as<uint64_t>();
    case ValueType::STRING: return std::string(v.string());
    case ValueType::ARRAY: {
      nlohmann::json arr = nlohmann::json::array();
      const gguf::ArrayView a = v.array();
      size_t i = 0;
      for (ValueView e : a) {
        if (i++ == max_elements) {
          if (truncated) *truncated = true;
          break;
        }
        arr.push_back(value_to_json(e, max_elements, truncated));
      }
      return arr;
    }
    default: return *v.as<int64_t>();
  }
}

std::string value_to_text(const ValueView& v, size_t max_elements, size_t max_chars) {
  switch (v.type()) {
    case ValueType::BOOL: return *v.as<bool>() ? "true" : "false";
    case ValueType::FLOAT32: return fmt::format("{}", *v.as<float>());
    case ValueType::FLOAT64: return fmt::format("{}", *v.as<double>());
    case ValueType::UINT64: return fmt::format("{}", *v.as<uint64_t>());
    case ValueType::STRING: return escape(v.string(), max_chars);
    case ValueType::ARRAY: {
      const gguf::ArrayView a = v.array();
      std::string out = fmt::format("[{} × {}]", a.size(), gguf::value_type_name(a.element_type()));
      size_t i = 0;
      for (ValueView e : a) {
        if (i == max_elements) {
          out += ", …";
          break;
        }
        out += i++ == 0 ? " " : ", ";
        out += value_to_text(e, max_elements, 24);
      }
      return out;
    }
    default: return fmt::format("{}", *v.as<int64_t>());
  }
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string read_text(const std::string& path, const char* what) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot read the {} file", path, what));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace zinc::cli

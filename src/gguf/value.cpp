#include "gguf/value.h"

#include <limits>

#include "core/error.h"

namespace zinc::gguf {

namespace {

// resize + memcpy rather than vector::insert, which GCC 12 misreads as an overflow.
void append(std::vector<uint8_t>& out, const void* p, size_t n) {
  const size_t at = out.size();
  out.resize(at + n);
  if (n) std::memcpy(out.data() + at, p, n);
}

}  // namespace

size_t encoded_size(ValueType t, const uint8_t* p) {
  switch (t) {
    case ValueType::STRING:
      return 8 + static_cast<size_t>(load_le<uint64_t>(p));
    case ValueType::ARRAY: {
      const auto elem = static_cast<ValueType>(load_le<uint32_t>(p));
      const uint64_t count = load_le<uint64_t>(p + 4);
      const size_t fixed = value_type_size(elem);
      if (fixed) return 12 + static_cast<size_t>(count) * fixed;
      size_t n = 12;
      for (uint64_t i = 0; i < count; ++i) n += encoded_size(elem, p + n);
      return n;
    }
    default:
      return value_type_size(t);
  }
}

bool ValueView::is_integer() const {
  switch (type_) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

std::optional<int64_t> ValueView::as_i64() const {
  const uint8_t* p = bytes_.data();
  switch (type_) {
    case ValueType::UINT8: return load_le<uint8_t>(p);
    case ValueType::INT8: return load_le<int8_t>(p);
    case ValueType::UINT16: return load_le<uint16_t>(p);
    case ValueType::INT16: return load_le<int16_t>(p);
    case ValueType::UINT32: return load_le<uint32_t>(p);
    case ValueType::INT32: return load_le<int32_t>(p);
    case ValueType::INT64: return load_le<int64_t>(p);
    case ValueType::UINT64: {
      const uint64_t v = load_le<uint64_t>(p);
      if (!std::in_range<int64_t>(v)) return std::nullopt;
      return static_cast<int64_t>(v);
    }
    default: return std::nullopt;
  }
}

std::optional<uint64_t> ValueView::as_u64() const {
  if (type_ == ValueType::UINT64) return load_le<uint64_t>(bytes_.data());
  const auto v = as_i64();
  if (!v || *v < 0) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

std::optional<double> ValueView::as_f64() const {
  if (type_ == ValueType::FLOAT32) return load_le<float>(bytes_.data());
  if (type_ == ValueType::FLOAT64) return load_le<double>(bytes_.data());
  if (type_ == ValueType::UINT64) return static_cast<double>(load_le<uint64_t>(bytes_.data()));
  if (const auto v = as_i64()) return static_cast<double>(*v);
  return std::nullopt;
}

std::string_view ValueView::string() const {
  return {reinterpret_cast<const char*>(bytes_.data() + 8), bytes_.size() - 8};
}

ArrayView ValueView::array() const {
  const auto elem = static_cast<ValueType>(load_le<uint32_t>(bytes_.data()));
  const uint64_t count = load_le<uint64_t>(bytes_.data() + 4);
  return ArrayView(elem, count, bytes_.subspan(12));
}

ValueView ArrayView::at(uint64_t i) const {
  const size_t fixed = value_type_size(elem_);
  if (fixed) return ValueView(elem_, elems_.subspan(static_cast<size_t>(i) * fixed, fixed));
  auto it = begin();
  for (uint64_t k = 0; k < i; ++k) ++it;
  return *it;
}

std::vector<std::string_view> ArrayView::strings() const {
  std::vector<std::string_view> out;
  if (elem_ != ValueType::STRING) return out;
  out.reserve(count_);
  for (ValueView v : *this) out.push_back(v.string());
  return out;
}

Value Value::str(std::string_view s) {
  Value out;
  out.type_ = ValueType::STRING;
  const uint64_t n = s.size();
  out.bytes_.resize(8 + s.size());
  std::memcpy(out.bytes_.data(), &n, 8);
  std::memcpy(out.bytes_.data() + 8, s.data(), s.size());
  return out;
}

void Value::append_array_header(ValueType element_type, uint64_t count) {
  const auto t = static_cast<uint32_t>(element_type);
  append(bytes_, &t, 4);
  append(bytes_, &count, 8);
}

Value Value::array(ValueType element_type, const std::vector<Value>& elements) {
  Value out;
  out.type_ = ValueType::ARRAY;
  out.append_array_header(element_type, elements.size());
  for (const Value& e : elements) {
    if (e.type_ != element_type) {
      throw Error("GGUF array of " + std::string(value_type_name(element_type)) + " cannot hold a " +
                  std::string(value_type_name(e.type_)));
    }
    append(out.bytes_, e.bytes_.data(), e.bytes_.size());
  }
  return out;
}

Value Value::strings(const std::vector<std::string>& items) {
  Value out;
  out.type_ = ValueType::ARRAY;
  out.append_array_header(ValueType::STRING, items.size());
  for (const std::string& s : items) {
    const uint64_t n = s.size();
    append(out.bytes_, &n, 8);
    append(out.bytes_, s.data(), s.size());
  }
  return out;
}

Value Value::copy_of(const ValueView& view) {
  Value out;
  out.type_ = view.type();
  out.bytes_.assign(view.encoded().begin(), view.encoded().end());
  return out;
}

void Metadata::set(std::string_view key, Value value) {
  for (auto& [k, v] : items_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::string(key), std::move(value));
}

const Value* Metadata::find(std::string_view key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Metadata::remove(std::string_view key) {
  for (auto it = items_.begin(); it != items_.end(); ++it) {
    if (it->first == key) {
      items_.erase(it);
      return true;
    }
  }
  return false;
}

}  // namespace zinc::gguf

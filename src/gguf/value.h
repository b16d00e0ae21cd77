// GGUF metadata values. A ValueView points at a value's encoded bytes inside a buffer the reader has
// already validated (a mapped file, or an owned Value), so reading a 150k-entry token array costs no
// copies until someone asks for one. Value owns its encoding and is what the writer serialises.
//
// Encoding (little-endian): scalars as themselves; STRING = u64 length + bytes (no terminator);
// ARRAY = u32 element type + u64 count + elements, which may themselves be arrays.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "gguf/types.h"

namespace zinc::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF I/O assumes a little-endian host");

template <class T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Encoded size of the value of type t starting at p. Only for bytes already validated by the reader.
size_t encoded_size(ValueType t, const uint8_t* p);

class ArrayView;

class ValueView {
 public:
  ValueView() = default;
  ValueView(ValueType type, std::span<const uint8_t> encoded) : type_(type), bytes_(encoded) {}

  ValueType type() const { return type_; }
  std::span<const uint8_t> encoded() const { return bytes_; }

  bool is_integer() const;
  bool is_float() const { return type_ == ValueType::FLOAT32 || type_ == ValueType::FLOAT64; }

  // Typed reads. nullopt when the stored type does not convert to T or the value does not fit T.
  // Integers convert between widths when the value is in range; floats accept float32/float64 and
  // integers; strings give views into the buffer; std::vector<T> converts every array element.
  template <class T>
  std::optional<T> as() const;

  std::string_view string() const;  // requires type() == STRING
  ArrayView array() const;          // requires type() == ARRAY

 private:
  std::optional<int64_t> as_i64() const;
  std::optional<uint64_t> as_u64() const;
  std::optional<double> as_f64() const;

  ValueType type_ = ValueType::UINT8;
  std::span<const uint8_t> bytes_;
};

class ArrayView {
 public:
  ArrayView() = default;
  ArrayView(ValueType element_type, uint64_t count, std::span<const uint8_t> elements)
      : elem_(element_type), count_(count), elems_(elements) {}

  ValueType element_type() const { return elem_; }
  uint64_t size() const { return count_; }
  bool empty() const { return count_ == 0; }

  class iterator {
   public:
    using value_type = ValueView;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(ValueType t, const uint8_t* p) : t_(t), p_(p) {}
    ValueView operator*() const { return ValueView(t_, {p_, encoded_size(t_, p_)}); }
    iterator& operator++() {
      p_ += encoded_size(t_, p_);
      return *this;
    }
    iterator operator++(int) {
      auto old = *this;
      ++*this;
      return old;
    }
    bool operator==(const iterator& o) const { return p_ == o.p_; }

   private:
    ValueType t_ = ValueType::UINT8;
    const uint8_t* p_ = nullptr;
  };
  iterator begin() const { return {elem_, elems_.data()}; }
  iterator end() const { return {elem_, elems_.data() + elems_.size()}; }

  // Element i: O(1) for fixed-size element types, O(i) for strings and arrays.
  ValueView at(uint64_t i) const;

  std::vector<std::string_view> strings() const;  // empty unless element_type() == STRING

 private:
  ValueType elem_ = ValueType::UINT8;
  uint64_t count_ = 0;
  std::span<const uint8_t> elems_;
};

template <class T>
struct is_std_vector : std::false_type {};
template <class T>
struct is_std_vector<std::vector<T>> : std::true_type {};

template <class T>
std::optional<T> ValueView::as() const {
  if constexpr (std::is_same_v<T, bool>) {
    if (type_ != ValueType::BOOL) return std::nullopt;
    return bytes_[0] != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_signed_v<T>) {
      const auto v = as_i64();
      if (v && std::in_range<T>(*v)) return static_cast<T>(*v);
    } else {
      const auto v = as_u64();
      if (v && std::in_range<T>(*v)) return static_cast<T>(*v);
    }
    return std::nullopt;
  } else if constexpr (std::is_floating_point_v<T>) {
    const auto v = as_f64();
    if (!v) return std::nullopt;
    return static_cast<T>(*v);
  } else if constexpr (std::is_same_v<T, std::string_view>) {
    if (type_ != ValueType::STRING) return std::nullopt;
    return string();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (type_ != ValueType::STRING) return std::nullopt;
    return std::string(string());
  } else if constexpr (std::is_same_v<T, ArrayView>) {
    if (type_ != ValueType::ARRAY) return std::nullopt;
    return array();
  } else if constexpr (is_std_vector<T>::value) {
    if (type_ != ValueType::ARRAY) return std::nullopt;
    const ArrayView arr = array();
    T out;
    out.reserve(arr.size());
    for (ValueView e : arr) {
      auto v = e.as<typename T::value_type>();
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
    }
    return out;
  } else {
    static_assert(sizeof(T) == 0, "unsupported GGUF value type");
  }
}

// Human-readable name of what as<T>() accepts, for error messages.
template <class T>
std::string expected_type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) return "integer fitting int" + std::to_string(8 * sizeof(T));
  else if constexpr (std::is_integral_v<T>) return "non-negative integer fitting uint" + std::to_string(8 * sizeof(T));
  else if constexpr (std::is_floating_point_v<T>) return "number";
  else if constexpr (std::is_same_v<T, std::string_view> || std::is_same_v<T, std::string>) return "string";
  else if constexpr (std::is_same_v<T, ArrayView>) return "array";
  else if constexpr (is_std_vector<T>::value) return "array of " + expected_type_name<typename T::value_type>();
  else return "value";
}

// An owned, encoded value: what the writer serialises and what tests build files from.
class Value {
 public:
  static Value u8(uint8_t v) { return scalar(ValueType::UINT8, v); }
  static Value i8(int8_t v) { return scalar(ValueType::INT8, v); }
  static Value u16(uint16_t v) { return scalar(ValueType::UINT16, v); }
  static Value i16(int16_t v) { return scalar(ValueType::INT16, v); }
  static Value u32(uint32_t v) { return scalar(ValueType::UINT32, v); }
  static Value i32(int32_t v) { return scalar(ValueType::INT32, v); }
  static Value u64(uint64_t v) { return scalar(ValueType::UINT64, v); }
  static Value i64(int64_t v) { return scalar(ValueType::INT64, v); }
  static Value f32(float v) { return scalar(ValueType::FLOAT32, v); }
  static Value f64(double v) { return scalar(ValueType::FLOAT64, v); }
  static Value boolean(bool v) { return scalar(ValueType::BOOL, static_cast<uint8_t>(v ? 1 : 0)); }
  static Value str(std::string_view s);
  // An array whose elements all have type `element_type` (throws zinc::Error otherwise).
  static Value array(ValueType element_type, const std::vector<Value>& elements);
  static Value strings(const std::vector<std::string>& items);
  static Value f32s(std::span<const float> items) { return numbers(ValueType::FLOAT32, items); }
  static Value i32s(std::span<const int32_t> items) { return numbers(ValueType::INT32, items); }
  static Value u32s(std::span<const uint32_t> items) { return numbers(ValueType::UINT32, items); }
  // A copy of a value read from a file, byte for byte.
  static Value copy_of(const ValueView& view);

  ValueType type() const { return type_; }
  ValueView view() const { return ValueView(type_, bytes_); }
  const std::vector<uint8_t>& encoded() const { return bytes_; }

 private:
  template <class T>
  static Value scalar(ValueType t, T v) {
    Value out;
    out.type_ = t;
    out.bytes_.resize(sizeof v);
    std::memcpy(out.bytes_.data(), &v, sizeof v);
    return out;
  }
  template <class T>
  static Value numbers(ValueType t, std::span<const T> items) {
    Value out;
    out.type_ = ValueType::ARRAY;
    out.append_array_header(t, items.size());
    const size_t at = out.bytes_.size();
    out.bytes_.resize(at + items.size_bytes());
    if (!items.empty()) std::memcpy(out.bytes_.data() + at, items.data(), items.size_bytes());
    return out;
  }
  void append_array_header(ValueType element_type, uint64_t count);

  ValueType type_ = ValueType::UINT8;
  std::vector<uint8_t> bytes_;
};

// Ordered key → value store for building a file. Keys keep their insertion order; set() on an
// existing key replaces the value in place, so a rewritten file keeps its original key order.
class Metadata {
 public:
  void set(std::string_view key, Value value);
  const Value* find(std::string_view key) const;
  bool remove(std::string_view key);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

}  // namespace zinc::gguf

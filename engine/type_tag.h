// Downcasts without RTTI: the inference path also builds with -fno-rtti (docs/embedding.md), where dynamic_cast does
// not exist. A base class declares `virtual bool is_a(const void* tag) const` (false); a class that is downcast to
// declares ENG_TYPE_TAG(Self, Base) in its body, which answers for its own tag and defers to Base for the others,
// so that tag_cast<T>(p) is p as a T when *p is a T or derives from one, else null (dynamic_cast's answer).
#pragma once
#include <type_traits>

namespace eng {

// One address per type: a function template's static exists once in the program.
template <class T>
const void* type_tag() {
  static const char tag = 0;
  return &tag;
}

template <class T, class Base>
T* tag_cast(Base* p) {
  return p && p->is_a(type_tag<std::remove_const_t<T>>()) ? static_cast<T*>(p) : nullptr;
}

}  // namespace eng

#define ENG_TYPE_TAG(Self, Base) \
  bool is_a(const void* tag) const override { return tag == ::eng::type_tag<Self>() || Base::is_a(tag); }

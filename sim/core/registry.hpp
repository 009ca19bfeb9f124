// A registry entry: how `bitlab` finds an optimizer or problem by name,
// validates its options and describes them for `bitlab list`. Each concrete
// optimizer/problem provides an options struct with
//   static Schema<Options> schema();
// and a constructor taking `const Options&`.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "sim/core/schema.hpp"

namespace bitlab {

// What a base type's constructors take besides their options: nothing, except
// problems, which take a DataScope (problems/problem.hpp: which training samples
// this process holds). An implementation constructible from its options alone
// ignores the context.
struct NoContext {};
template <class Base>
struct MakeContext {
  using type = NoContext;
};

// What an entry can tell of what it builds without building it: nothing by
// default; problems say their parameter count and tensors (ProblemShape,
// problems/problem.hpp), which `bitlab cost` prices without allocating them.
struct NoShape {};
template <class Base>
struct ShapeOf {
  using type = NoShape;
};

// What a base type's entries carry besides the fields below, taken from the
// options struct: nothing, except optimizers (optimizers/optimizer.hpp: the
// uncompressed twin each one declares).
template <class Base>
struct EntryExtras {
  template <class Options>
  static EntryExtras from() {
    return {};
  }
};

template <class Base>
struct RegistryEntry : EntryExtras<Base> {
  using Context = typename MakeContext<Base>::type;
  std::string name;
  std::string summary;  // one line, with the paper it follows where there is one
  std::vector<FieldInfo> fields;
  // Validates a raw options object (with "name") and returns it resolved:
  // {"name": ..., every field with its value or default}.
  std::function<Json(const Json& raw, const std::string& path)> resolve;
  // Builds from a resolved object.
  std::function<std::unique_ptr<Base>(const Json& resolved, const Context& context)> build;
  std::unique_ptr<Base> make(const Json& resolved, const Context& context = {}) const {
    return build(resolved, context);
  }
  // From a resolved object, what `build` would give without building it
  // (ShapeOf<Base>); `detail` asks for the costly parts too (a problem's
  // tensor list). Set when the implementation has a static
  // shape(const Options&, bool detail); empty otherwise.
  using Shape = typename ShapeOf<Base>::type;
  std::function<Shape(const Json& resolved, bool detail)> shape;
};

template <class Base, class Impl, class Options>
RegistryEntry<Base> make_registry_entry(std::string name, std::string summary) {
  auto schema = std::make_shared<Schema<Options>>(Options::schema());
  schema->allow_key("name");
  RegistryEntry<Base> e;
  static_cast<EntryExtras<Base>&>(e) = EntryExtras<Base>::template from<Options>();
  e.name = name;
  e.summary = std::move(summary);
  e.fields = schema->describe();
  e.resolve = [schema, name](const Json& raw, const std::string& path) {
    const Options o = schema->read(raw, path);
    Json out = Json::object();
    out["name"] = name;
    const Json fields = schema->write(o);  // named: items() must not outlive it
    for (auto& [k, v] : fields.items()) out[k] = v;
    return out;
  };
  using Context = typename RegistryEntry<Base>::Context;
  e.build = [schema](const Json& resolved, const Context& context) -> std::unique_ptr<Base> {
    if constexpr (std::is_constructible_v<Impl, const Options&, const Context&>) {
      return std::make_unique<Impl>(schema->read(resolved, ""), context);
    } else {
      (void)context;
      return std::make_unique<Impl>(schema->read(resolved, ""));
    }
  };
  using Shape = typename RegistryEntry<Base>::Shape;
  if constexpr (requires(const Options& o) {
                  { Impl::shape(o, true) } -> std::convertible_to<Shape>;
                }) {
    e.shape = [schema](const Json& resolved, bool detail) -> Shape {
      return Impl::shape(schema->read(resolved, ""), detail);
    };
  }
  return e;
}

template <class Base>
const RegistryEntry<Base>* find_entry(const std::vector<RegistryEntry<Base>>& reg,
                                      const std::string& name) {
  for (const auto& e : reg) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace bitlab

// The Jinja interpreter's own behaviour: error messages with line and column, the limits that keep
// hostile templates from exhausting the stack, memory or time, and the Jinja built-ins ZINC adds
// beyond the reference renderer (whose byte-for-byte agreement with ZINC is checked by the oracle test,
// run_chat_oracle.sh). Expected values are written by hand from Jinja's documented semantics.
#include <gtest/gtest.h>

#include <chrono>

#include "chat/jinja.h"

namespace {

using nlohmann::ordered_json;
using zinc::chat::Template;
using zinc::chat::TemplateError;
using zinc::chat::jinja::RenderOptions;

std::string render(const std::string& source, const ordered_json& context = ordered_json::object(),
                   const RenderOptions& options = {}) {
  return Template::parse(source, "t").render(context, options);
}

// The error a template raises (parse or render), or "" when it renders.
TemplateError error_of(const std::string& source, const ordered_json& context = ordered_json::object(),
                       const RenderOptions& options = {}) {
  try {
    render(source, context, options);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "expected an error from: " << source.substr(0, 200);
  return TemplateError("", 0, 0, false);
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

TEST(Jinja, RendersVariablesAndText) {
  EXPECT_EQ(render("Hello {{ name }}!", {{"name", "World"}}), "Hello World!");
  EXPECT_EQ(render("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}",
                   {{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}}}}),
            "[user] hi\n[assistant] yo\n");
}

TEST(Jinja, TemplateIsReusableAcrossRenders) {
  const Template t = Template::parse("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(t.render({{"xs", {1, 2, 3}}}), "6");
  EXPECT_EQ(t.render({{"xs", {10}}}), "10");
  EXPECT_EQ(t.render({{"xs", ordered_json::array()}}), "0");
}

TEST(Jinja, ErrorNamesTheConstructLineAndColumn) {
  const TemplateError e = error_of("line1\n{{ 'a' | nofilter }}");
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.column, 8);
  EXPECT_STREQ(e.what(), "t:2:8: unknown filter 'nofilter' for a string");
  EXPECT_FALSE(e.raised_by_template);
}

TEST(Jinja, ParseErrorsAreLocated) {
  {
    const TemplateError e = error_of("{% raw %}x{% endraw %}");
    EXPECT_STREQ(e.what(), "t:1:1: unsupported statement '{% raw %}'");
  }
  {
    // The column counts the original source, before lstrip_blocks removed the indentation.
    const TemplateError e = error_of("a\n  {% if x %}\nb");
    EXPECT_EQ(e.line, 2);
    EXPECT_EQ(e.column, 3);
    EXPECT_TRUE(contains(e.what(), "'{% if %}' is not closed: expected '{% endif %}'")) << e.what();
  }
  {
    const TemplateError e = error_of("{{ 'abc }}");
    EXPECT_STREQ(e.what(), "t:1:4: string literal is not closed");
  }
  {
    const TemplateError e = error_of("{% for x in %}{% endfor %}");
    EXPECT_TRUE(contains(e.what(), "t:1:13: unexpected '%}': expected an expression")) << e.what();
  }
  {
    const TemplateError e = error_of("{% endfor %}");
    EXPECT_STREQ(e.what(), "t:1:1: '{% endfor %}' without a matching opening statement");
  }
  {
    const TemplateError e = error_of("é\n  ü {{ x ? y }}");
    EXPECT_STREQ(e.what(), "t:2:10: unexpected character '?' inside a tag");
  }
}

TEST(Jinja, RuntimeErrorsPointAtTheFailingExpression) {
  const TemplateError e = error_of(
      "{% macro show(m) %}\n"
      "  {{ m.content ~ none }}\n"
      "{% endmacro %}{{ show({'content': 'x'}) }}");
  EXPECT_EQ(e.line, 2);
  EXPECT_TRUE(contains(e.what(), "cannot apply '~' to none")) << e.what();
  EXPECT_TRUE(contains(error_of("{% for x in nothing %}{% endfor %}").what(),
                       "t:1:13: '{% for %}' cannot loop over an undefined value"));
  EXPECT_TRUE(contains(error_of("{{ foo.bar() }}").what(), "cannot call 'bar': it is an undefined value"));
}

TEST(Jinja, RaiseExceptionIsTheTemplatesOwnError) {
  const TemplateError e = error_of("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}",
                                   {{"messages", {{{"role", "system"}}}}});
  EXPECT_TRUE(e.raised_by_template);
  EXPECT_STREQ(e.what(), "t:1:41: the template raised an error: System role not supported");
}

TEST(Jinja, ContextMustBeAnObjectWithoutReservedNames) {
  EXPECT_TRUE(contains(error_of("x", ordered_json::array()).what(), "must be a JSON object"));
  EXPECT_TRUE(contains(error_of("x", {{"true", 1}}).what(), "variable 'true' is already declared"));
  EXPECT_EQ(render("{{ x }}", nullptr), "");
}

TEST(Jinja, DeepNestingIsRefusedNotFatal) {
  const std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_TRUE(contains(error_of(parens).what(), "nested too deeply"));
  std::string members = "{{ a";
  for (int i = 0; i < 100000; ++i) members += ".b";
  EXPECT_TRUE(contains(error_of(members + " }}").what(), "nested too deeply"));
  std::string sums = "{{ 1";
  for (int i = 0; i < 100000; ++i) sums += " + 1";
  EXPECT_TRUE(contains(error_of(sums + " }}").what(), "nested too deeply"));
  std::string ifs;
  for (int i = 0; i < 2000; ++i) ifs += "{% if true %}";
  EXPECT_TRUE(contains(error_of(ifs).what(), "nested too deeply"));
  std::string nots = "{{ " ;
  for (int i = 0; i < 100000; ++i) nots += "not ";
  EXPECT_TRUE(contains(error_of(nots + "x }}").what(), "nested too deeply"));
  // Moderate nesting still works.
  EXPECT_EQ(render("{{ " + std::string(100, '(') + "1" + std::string(100, ')') + " }}"), "1");
  std::string elifs = "{% if x == 0 %}0";
  for (int i = 1; i < 100; ++i) elifs += "{% elif x == " + std::to_string(i) + " %}" + std::to_string(i);
  EXPECT_EQ(render(elifs + "{% endif %}", {{"x", 99}}), "99");
}

TEST(Jinja, EndlessRecursionIsStopped) {
  EXPECT_TRUE(contains(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").what(), "macro calls nested deeper"));
  EXPECT_TRUE(contains(error_of("{% macro f(n) %}{{ f(n + 1) ~ f(n + 1) }}{% endmacro %}{{ f(0) }}").what(),
                       "macro calls nested deeper"));
}

TEST(Jinja, WorkIsBounded) {
  RenderOptions small;
  small.limits.max_steps = 1'000'000;
  EXPECT_TRUE(contains(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                                ordered_json::object(), small)
                           .what(),
                       "evaluation steps"));
  EXPECT_TRUE(contains(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}").what(),
                       "array longer than"));
  EXPECT_TRUE(contains(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}").what(),
                       "string longer than"));
  EXPECT_TRUE(contains(error_of("{{ range(1000000000) }}").what(), "array longer than"));
  RenderOptions tiny_output;
  tiny_output.limits.max_output_bytes = 1000;
  EXPECT_TRUE(contains(error_of("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", ordered_json::object(), tiny_output).what(),
                       "longer than 1000 bytes"));
  EXPECT_TRUE(contains(error_of("{% set ns = namespace(l=[]) %}{% for i in range(900000) %}{% set _ = ns.l.append(i) %}{% endfor %}",
                                ordered_json::object(), small)
                           .what(),
                       "evaluation steps"));
}

// Each of these would allocate gigabytes to terabytes before the result's length is checked, unless
// the string is checked while it is built (a hardening finding: one request reached 4.8 GB).
TEST(Jinja, StringBuildersStopAtTheLimitWhileBuilding) {
  RenderOptions o;
  o.limits.max_output_bytes = 1 << 20;  // a 1 MiB string may be built, not more
  o.limits.max_string_bytes = 4 << 20;
  // ns.s: 512 KiB of 'a'; nl: 512 Ki lines 'a'.
  const std::string mb = "{% set ns = namespace(s='a', nl='a\n') %}{% for i in range(19) %}{% set ns.s = ns.s ~ ns.s %}"
                         "{% set ns.nl = ns.nl ~ ns.nl %}{% endfor %}";
  for (const std::string& hostile : {
           mb + "{{ ns.s.replace('a', ns.s) }}",                  // 2^19 x 2^19 bytes
           mb + "{{ ns.s.replace('', ns.s) }}",
           mb + "{{ ns.s | join(ns.s) }}",
           mb + "{{ ns.nl | indent(4096) }}",                     // 2^19 lines of 4096 spaces
           mb + "{{ '{}{}{}'.format(ns.s, ns.s, ns.s) }}",
           mb + "{{ [ns.s, ns.s, ns.s] | join(',') }}",
           mb + "{{ [ns.s, ns.s, ns.s] | tojson }}",
           std::string("{{ [[[[[1]]]]] | tojson(indent=100000000) }}"),
           mb + "{% set l = [ns.s, ns.s] %}{% for i in range(3) %}{% set l = l + l %}{% endfor %}{{ l | tojson(indent=2) }}",
       }) {
    const std::string what = error_of(hostile, ordered_json::object(), o).what();
    EXPECT_TRUE(contains(what, "string longer than 1048576 bytes")) << hostile.substr(hostile.size() > mb.size() ? mb.size() : 0) << ": " << what;
  }
  // Strings that each fit, held together past the budget of live strings.
  const std::string what = error_of(mb + "{% set l = [] %}{% for i in range(20) %}{% set _ = l.append(ns.s ~ i) %}{% endfor %}",
                                    ordered_json::object(), o)
                               .what();
  EXPECT_TRUE(contains(what, "holds more than 4194304 bytes of strings")) << what;
  // Freed strings are credited back: the same work one string at a time renders.
  EXPECT_EQ(render(mb + "{% for i in range(20) %}{% set x = ns.s ~ i %}{% endfor %}ok", ordered_json::object(), o), "ok");
}

TEST(Jinja, SelfReferenceCannotHang) {
  EXPECT_TRUE(contains(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}").what(), "nested too deeply"));
  EXPECT_TRUE(contains(error_of("{% set l = [] %}{% set _ = l.append(l) %}{{ l }}").what(), "nested too deeply"));
  EXPECT_TRUE(contains(error_of("{% set l = [] %}{% set _ = l.append(l) %}{{ l == 'x' }}").what(), "nested too deeply"));
}

TEST(Jinja, StrftimeNowUsesTheGivenClock) {
  RenderOptions o;
  o.now = std::chrono::system_clock::from_time_t(1709802300);  // 2024-03-07 09:05:00 UTC
  const std::string out = render("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %% %Q') }}", ordered_json::object(), o);
  // Local time: the day may differ from UTC by one, the month and the unknown directive may not.
  EXPECT_TRUE(out.find("Mar 2024|March % %Q") != std::string::npos) << out;
}

// ---- Built-ins ZINC adds to the reference's set, with Jinja's (Python) semantics ----

TEST(JinjaExtensions, Filters) {
  EXPECT_EQ(render("{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('even')|list }}|{{ [0, 1, '', 'a']|select|list }}"),
            "[1, 3]|[1, 3]|[1, \"a\"]");
  EXPECT_EQ(render("{{ [1, 5, 9]|select('gt', 4)|list }}|{{ ['a', 'b']|select('in', ['b'])|list }}"), "[5, 9]|[\"b\"]");
  EXPECT_EQ(render("{{ ['a', 'b']|map('upper')|join(',') }}|{{ [' x ', 'y ']|map('trim')|list }}|{{ ['a,b']|map('replace', ',', ';')|list }}"),
            "A,B|[\"x\", \"y\"]|[\"a;b\"]");
  EXPECT_EQ(render("{{ [3, 1, 2]|min }}|{{ [3, 1, 2]|max }}|{{ ['b', 'A']|min }}|{{ []|max is undefined }}"), "1|3|A|true");
  EXPECT_EQ(render("{{ [{'v': 2}, {'v': 5}]|max(attribute='v') }}"), "{\"v\": 5}");
  EXPECT_EQ(render("{{ [1, 2, 3]|sum }}|{{ [{'v': 2}, {'v': 5}]|sum(attribute='v') }}|{{ [0.5, 1]|sum(start=1) }}"), "6|7|2.5");
  // Python's round(): ties go to the even neighbour, and an integer stays an integer.
  EXPECT_EQ(render("{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.4|round(0, 'ceil') }}|{{ 2.6|round(method='floor') }}|{{ 3|round }}"),
            "2.57|2.0|4.0|3.0|2.0|3");
}

TEST(JinjaExtensions, ListMethods) {
  EXPECT_EQ(render("{% set l = [1] %}{% set _ = l.append(2) %}{% set _ = l.insert(0, 0) %}{% set _ = l.extend([3, 4]) %}"
                   "{{ l }}|{{ l.pop() }}|{{ l.pop(0) }}|{{ l }}|{{ l.index(2) }}|{{ l.count(1) }}|{{ l.append(9) }}"),
            "[0, 1, 2, 3, 4]|4|0|[1, 2, 3]|1|1|");
  // The Kimi K2 pattern: a queue kept in a namespace.
  EXPECT_EQ(render("{% set q = namespace(ids=[]) %}{% for i in ['a', 'b'] %}{% set _ = q.ids.append(i) %}{% endfor %}"
                   "{{ q.ids.pop(0) }}{{ q.ids.pop(0) }}{{ q.ids|length }}"),
            "ab0");
  EXPECT_TRUE(contains(error_of("{{ [].pop() }}").what(), "pop() from an empty array"));
  EXPECT_TRUE(contains(error_of("{{ [1].index(2) }}").what(), "not in the array"));
}

TEST(JinjaExtensions, DictMethods) {
  EXPECT_EQ(render("{% set d = {'a': 1} %}{% set _ = d.update({'b': 2}, c=3) %}{{ d }}|{{ d.pop('a') }}|{{ d.pop('z', 'dflt') }}|"
                   "{{ d.setdefault('e', 5) }}|{{ d.setdefault('b', 7) }}|{{ d }}"),
            "{\"a\": 1, \"b\": 2, \"c\": 3}|1|dflt|5|2|{\"b\": 2, \"c\": 3, \"e\": 5}");
  EXPECT_TRUE(contains(error_of("{{ {}.pop('x') }}").what(), "key 'x' not found"));
}

TEST(JinjaExtensions, StringMethods) {
  EXPECT_EQ(render("{{ 'héllo'.find('l') }}|{{ 'abc'.find('z') }}|{{ 'banana'.count('an') }}|{{ ', '.join(['a', 'b']) }}"),
            "2|-1|2|a, b");
  EXPECT_EQ(render("{{ '{0}-{1}-{0}'.format('a', 'b') }}|{{ '{}{}'.format(1, none) }}|{{ '<{}>'.format(nothing) }}|{{ '{{}}'.format() }}"),
            "a-b-a|1None|<>|{}");
  EXPECT_TRUE(contains(error_of("{{ '{}{}'.format(1) }}").what(), "not enough arguments"));
}

TEST(JinjaExtensions, Tests) {
  EXPECT_EQ(render("{{ 1.5 is float }}|{{ 1 is float }}|{{ 6 is divisibleby(3) }}|{{ 7 is divisibleby(3) }}|{{ x is sameas(x) }}|"
                   "{{ 1 is ne(2) }}|{{ 1 is lt(2) }}|{{ 2 is ge(3) }}|{{ 2 is in([1, 2]) }}|{{ 'b' is in('abc') }}",
                   {{"x", {1}}}),
            "true|false|true|false|true|true|true|false|true|true");
}

TEST(Jinja, UnicodeCaseMapping) {
  EXPECT_EQ(render("{{ 'straße'|upper }}|{{ 'ÉCOLE'|lower }}|{{ 'ΟΔΟΣ'|lower }}|{{ 'привет'|upper }}|{{ 'élan'|capitalize }}"),
            "STRASSE|école|οδος|ПРИВЕТ|Élan");
}

}  // namespace

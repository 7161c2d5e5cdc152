/* test_template.c - unit tests of the chat-template interpreter (template.h):
 * one check per feature (whitespace control, statements, expressions,
 * filters, tests, methods, errors with positions, abuse limits). Expected
 * strings are what @huggingface/jinja renders (the conformance reference);
 * where kvwise follows Python Jinja instead, the comment says so. */
#include "testutil.h"
#include "kvwise/template.h"
#include "kvwise/memory.h"
#include <string.h>

static char g_out[65536];

/* renders tpl with the JSON context; returns the text or "ERR: <message>" */
static const char *R(const char *tpl, const char *ctx_json) {
    kw_err err = {{0}};
    kw_template *t = kw_template_parse(tpl, &err);
    if (!t) { snprintf(g_out, sizeof g_out, "ERR: %s", err.msg); return g_out; }
    cJSON *ctx = ctx_json ? cJSON_Parse(ctx_json) : NULL;
    char *out = NULL;
    if (kw_template_render(t, ctx, &out, &err) != 0) snprintf(g_out, sizeof g_out, "ERR: %s", err.msg);
    else snprintf(g_out, sizeof g_out, "%s", out);
    kw_template_output_free(out);
    cJSON_Delete(ctx);
    kw_template_free(t);
    return g_out;
}

#define EXPECT(tpl, ctx, want) do { const char *_g = R(tpl, ctx); \
    KW_CHECK_MSG(strcmp(_g, want) == 0, "template %s\n   got  [%s]\n   want [%s]", tpl, _g, want); } while (0)
#define EXPECT_ERR(tpl, ctx, sub) do { const char *_g = R(tpl, ctx); \
    KW_CHECK_MSG(strncmp(_g, "ERR: ", 5) == 0 && strstr(_g, sub), "template %s\n   got  [%s]\n   want error with [%s]", tpl, _g, sub); } while (0)

static void test_text_and_whitespace(void) {
    EXPECT("hello", NULL, "hello");
    EXPECT("hello\n", NULL, "hello");                       /* one trailing newline dropped */
    EXPECT("a {{ 'b' }} c", NULL, "a b c");
    EXPECT("a  {{- 'b' -}}  c", NULL, "abc");
    EXPECT("a\n  {%- if true %}x{% endif -%}\n  b", NULL, "axb");
    EXPECT("{% if true %}\nyes\n{% endif %}\n", NULL, "yes\n"); /* trim_blocks */
    EXPECT("  {% if true %}x{% endif %}", NULL, "x");           /* lstrip_blocks */
    EXPECT("  {{ 'x' }}", NULL, "  x");                         /* lstrip only applies to blocks */
    EXPECT("a{# comment #}b", NULL, "ab");
    EXPECT("a {#- c -#} b", NULL, "ab");
    EXPECT("x{% generation %}y{% endgeneration %}z", NULL, "xyz");
}

static void test_literals_and_ops(void) {
    EXPECT("{{ 'a\\n\\t\\'\"' }}", NULL, "a\n\t'\"");
    EXPECT("{{ \"\\u00e9\\x41\" }}", NULL, "\xc3\xa9" "A");
    EXPECT("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ 2 ** 10 }}", NULL, "7|3|-4|1|1024");
    /* % takes the divisor's sign, as in Python and Jinja (C's % takes the dividend's) */
    EXPECT("{{ -7 % 3 }}|{{ 7 % -3 }}|{{ -7 % -3 }}|{{ -6 % 3 }}|{{ (-9223372036854775807 - 1) % 7 }}", NULL, "2|-2|-1|0|6");
    EXPECT("{{ -7.5 % 2 }}|{{ 7.5 % -2 }}|{{ 7.5 % 2 }}", NULL, "0.5|-0.5|1.5");
    EXPECT("{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 1.5 + 1 }}|{{ 0.1 }}", NULL, "3.5|2.0|2.5|0.1");
    EXPECT("{{ 'a' ~ 1 ~ true }}|{{ 'n=' + 3 }}", NULL, "a1true|n=3");
    EXPECT("{{ true }}|{{ none }}|{{ undefined_var }}|{{ [1, 'a', none] }}", NULL, "true|||[1, \"a\", null]");
    EXPECT("{{ {'k': 1, 'j': [true]} }}", NULL, "{\"k\": 1, \"j\": [true]}");
    EXPECT("{{ 1 < 2 and 2 <= 2 and 3 > 2 and not 1 == 2 and 1 != 2 }}", NULL, "true");
    EXPECT("{{ 'b' in 'abc' }}|{{ 'z' not in 'abc' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}", NULL, "true|true|true|true");
    EXPECT("{{ x in undefined_var }}", NULL, "false");
    EXPECT("{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 else 'no' }}|{{ 'x' if false }}", NULL, "yes|no|");
    EXPECT("{{ 0 or 'b' }}|{{ 'a' and 'b' }}|{{ [] or 'e' }}", NULL, "b|b|e");
    EXPECT("{{ [1, 2] + [3] }}", NULL, "[1, 2, 3]");
    EXPECT("{{ -x }}|{{ +x }}|{{ - 2 }}", "{\"x\": 3}", "-3|3|-2");
    EXPECT("{{ True }}{{ False }}{{ None }}", NULL, "truefalse");
}

static void test_access_and_slices(void) {
    const char *ctx = "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}, \"l\": [10, 20, 30, 40], \"s\": \"h\xc3\xa9llo\"}";
    EXPECT("{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ l[9] }}", ctx,
           "user hi |10 40 20 ");
    EXPECT("{{ l[1:3] }}|{{ l[:2] }}|{{ l[2:] }}|{{ l[::-1] }}|{{ l[::2] }}|{{ l[-2:] }}|{{ l[:-1] }}", ctx,
           "[20, 30]|[10, 20]|[30, 40]|[40, 30, 20, 10]|[10, 30]|[30, 40]|[10, 20, 30]");
    EXPECT("{{ s[1] }}|{{ s[::-1] }}|{{ s[1:3] }}|{{ s|length }}", ctx, "\xc3\xa9|oll\xc3\xa9h|\xc3\xa9l|5");
    EXPECT("{{ l.length }}|{{ s.length }}", ctx, "4|5");
    /* found by fuzz_template: a step of INT64_MIN overflowed the index loop (UBSan) */
    EXPECT("{{ l[::-9223372036854775807 - 1] }}|{{ s[::-9223372036854775807 - 1] }}|{{ l[::9223372036854775807] }}", ctx,
           "[40]|o|[10]");
    EXPECT("{{ l[1::-9223372036854775807] }}|{{ l[-9223372036854775807 - 1:9223372036854775807:3] }}|{{ l[::0] }}", ctx,
           "[20]|[10, 40]|[]");
    EXPECT("{{ [7][::-9223372036854775807 - 1] }}|{{ 'x'[::-9223372036854775807 - 1] }}|{{ l[1::9223372036854775807] }}",
           ctx, "[7]|x|[20]");
    EXPECT("{{ s[::-3] }}|{{ l[3:0:-2] }}|{{ l[0:4:3] }}", ctx, "o\xc3\xa9|[40, 20]|[10, 40]");
    EXPECT("{{ m.nope.deeper }}", ctx, "");                    /* attribute of undefined is undefined */
}

static void test_statements(void) {
    const char *ctx = "{\"xs\": [\"a\", \"b\", \"c\"], \"d\": {\"k1\": 1, \"k2\": 2}}";
    EXPECT("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", ctx, "1a,2b,3c");
    EXPECT("{% for x in xs %}{{ loop.index0 }}{{ loop.first }}{{ loop.length }}{{ loop.revindex }} {% endfor %}", ctx,
           "0true33 1false32 2false31 ");
    EXPECT("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    EXPECT("{% for x in xs if x != 'b' %}{{ x }}{{ loop.length }}{% endfor %}", ctx, "a2c2");
    EXPECT("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx, "k1=1;k2=2;");
    EXPECT("{% for k in d %}{{ k }}{% endfor %}", ctx, "k1k2");
    EXPECT("{% for c in 'h\xc3\xa9y' %}{{ c }}|{% endfor %}", NULL, "h|\xc3\xa9|y|");   /* Python: strings iterate */
    EXPECT("{{ 'ab'|selectattr('type')|list }}|{{ 'ab'|rejectattr('type')|list }}", NULL, "[]|[\"a\", \"b\"]");
    EXPECT("{% for x in xs %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx, "a");
    EXPECT("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{{ x }}{% endfor %}", ctx, "ac");
    EXPECT("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}", NULL, "b");
    EXPECT("{% set x = 5 %}{{ x }}{% set a, b = 1, 2 %}{{ a }}{{ b }}", NULL, "512");
    EXPECT("{% set ns = namespace(n=0, s='') %}{% for x in xs %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", ctx, "3");
    EXPECT("{% set y = 1 %}{% for x in xs %}{% set y = 2 %}{% endfor %}{{ y }}", ctx, "1");  /* loop scope */
    EXPECT("{% set blk %}in {{ 1 + 1 }}{% endset %}[{{ blk }}]", NULL, "[in 2]");
    EXPECT("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }}{{ greet('Bo', punct='?') }}",
           NULL, "Hi Ann!Hi Bo?");
    EXPECT("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{% endcall %}", NULL, "<body>");
    EXPECT("{% filter upper %}abc{% endfilter %}", NULL, "ABC");
    EXPECT("{{ raise_exception('bad role') if false }}ok", NULL, "ok");
    EXPECT("{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}", NULL, "012135");
    EXPECT("{{ strftime_now('%Y')|length }}|{{ strftime_now('%d %b')|length }}|{{ strftime_now('%%') }}", NULL, "4|6|%");
}

static void test_filters(void) {
    const char *ctx = "{\"t\": [{\"name\": \"a\", \"on\": true, \"p\": {\"q\": 1}}, {\"name\": \"b\", \"on\": false, \"p\": {\"q\": 2}}],"
                      " \"s\": \"  Hello World  \", \"n\": -2.5, \"d\": {\"b\": 2, \"a\": 1}}";
    EXPECT("{{ s|trim }}|{{ s|length }}|{{ 'ab'|upper }}|{{ 'AB'|lower }}|{{ 'hello world'|title }}|{{ 'hi there'|capitalize }}",
           ctx, "Hello World|15|AB|ab|Hello World|Hi there");
    EXPECT("{{ t|selectattr('on')|map(attribute='name')|join(',') }}|{{ t|rejectattr('on')|map(attribute='name')|list }}",
           ctx, "a|[\"b\"]");
    EXPECT("{{ t|selectattr('name', 'equalto', 'b')|map(attribute='p.q')|first }}", ctx, "2");
    EXPECT("{{ t|length }}|{{ t|first|tojson }}|{{ (t|last).name }}", ctx,
           "2|{\"name\": \"a\", \"on\": true, \"p\": {\"q\": 1}}|b");
    EXPECT("{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort(reverse=true) }}|{{ t|sort(attribute='name', reverse=true)|map(attribute='name')|join }}",
           ctx, "[1, 2, 3]|[\"c\", \"b\", \"A\"]|ba");
    EXPECT("{{ [1, 2, 1, 3, 2]|unique|list }}|{{ [1, 2]|reverse }}", NULL, "[1, 2, 3]|[2, 1]");
    EXPECT("{{ d|dictsort }}|{{ d|items }}", ctx, "[[\"a\", 1], [\"b\", 2]]|[[\"b\", 2], [\"a\", 1]]");
    EXPECT("{{ 'a-b-a'|replace('a', 'x') }}|{{ 'aaa'|replace('a', 'b', 2) }}", NULL, "x-b-x|bba");
    EXPECT("{{ undefined_var|default('dflt') }}|{{ ''|default('e', true) }}|{{ 'v'|default('d') }}", NULL, "dflt|e|v");
    EXPECT("{{ '42'|int + 1 }}|{{ '3.5'|float }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ n|abs }}|{{ 7|string ~ '!' }}", ctx,
           "43|3.5|0|3|2.5|7!");
    EXPECT("{{ 2.567|round(2) }}|{{ 2.5|round }}", NULL, "2.57|3.0");           /* Python Jinja's round */
    EXPECT("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'x\\ny'|indent(2, true) }}", NULL, "a\n  b\n\n  c|  x\n  y");
    EXPECT("{{ [1, 2]|count }}|{{ 'abc'|safe }}|{{ [1, 'a']|join('-') }}", NULL, "2|abc|1-a");
    EXPECT("{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}", NULL, "[1, 3]|[2, 4]");
}

static void test_tojson(void) {
    const char *ctx = "{\"o\": {\"z\": 1, \"a\": [1.5, \"\xed\x95\x9c \\\"q\\\" \\n\", null, true], \"e\": {}, \"l\": []}}";
    EXPECT("{{ o|tojson }}", ctx, "{\"z\": 1, \"a\": [1.5, \"\xed\x95\x9c \\\"q\\\" \\n\", null, true], \"e\": {}, \"l\": []}");
    EXPECT("{{ o|tojson(indent=2) }}", ctx,
           "{\n  \"z\": 1,\n  \"a\": [\n    1.5,\n    \"\xed\x95\x9c \\\"q\\\" \\n\",\n    null,\n    true\n  ],\n  \"e\": {},\n  \"l\": []\n}");
    EXPECT("{{ o.a|tojson(ensure_ascii=true) }}", ctx, "[1.5, \"\\ud55c \\\"q\\\" \\n\", null, true]");
    EXPECT("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ [1, 2]|tojson(separators=[',', ':']) }}", NULL,
           "{\"a\": 2, \"b\": 1}|[1,2]");
    EXPECT("{{ 1.0|tojson }}|{{ (10.0 ** 21)|tojson }}|{{ 0.000001|tojson }}|{{ 0.0000001|tojson }}", NULL, "1|1e+21|0.000001|1e-7");
    EXPECT("{{ '\\x01'|tojson }}", NULL, "\"\\u0001\"");
}

static void test_tests_and_methods(void) {
    const char *ctx = "{\"s\": \"x\", \"n\": 3, \"f\": 1.5, \"l\": [1], \"d\": {\"a\": 1}, \"z\": null, \"b\": false}";
    EXPECT("{{ s is string }}{{ n is number }}{{ n is integer }}{{ f is float }}{{ l is iterable }}{{ d is mapping }}"
           "{{ z is none }}{{ b is boolean }}{{ b is false }}{{ q is defined }}{{ q is undefined }}{{ n is odd }}{{ n is even }}"
           "{{ l is sequence }}{{ s is not none }}{{ 'ab' is lower }}{{ 'AB' is upper }}",
           ctx, "truetruetruetruetruetruetruetruetruefalsetruetruefalsetruetruetruetrue");
    EXPECT("{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}{{ ' a b  c '.split() }}{{ 'a,b,,c'.split(',') }}"
           "{{ 'a,b,c'.split(',', 1) }}", NULL,
           "truetrue[\"a\", \"b\", \"c\"][\"a\", \"b\", \"\", \"c\"][\"a\", \"b,c\"]");
    EXPECT("[{{ '  x  '.strip() }}][{{ '\\n\\nx\\n'.lstrip('\\n') }}][{{ 'x\\n \\n'.rstrip('\\n') }}][{{ 'xxhixx'.strip('x') }}]", NULL,
           "[x][x\n][x\n ][hi]");                                 /* strip(chars): Python semantics */
    EXPECT("{{ 'aBc'.upper() }}{{ 'aBc'.lower() }}{{ 'a b'.title() }}{{ 'abc'.replace('b', 'X') }}", NULL, "ABCabcA BaXc");
    EXPECT("{{ d.get('a') }}{{ d.get('q', 'dflt') }}{{ d.get('q') }}{{ d.keys() }}{{ d.values() }}{{ d.items() }}", ctx,
           "1dflt[\"a\"][1][[\"a\", 1]]");
    EXPECT("{{ 'abc'.content }}", NULL, "");
}

static void test_errors(void) {
    EXPECT_ERR("line1\n{% if x %}\nno end", NULL, "line 3");
    EXPECT_ERR("line1\n{% if x %}\nno end", NULL, "missing {% endif %}");
    EXPECT_ERR("{{ 1 + }}", NULL, "line 1, col 8");
    EXPECT_ERR("{% foo %}", NULL, "unknown or unexpected statement 'foo'");
    EXPECT_ERR("{{ 'unterminated }}", NULL, "unterminated string");
    EXPECT_ERR("a\nb {{ raise_exception('Conversation roles must alternate') }}", NULL,
               "line 2, col 6: Conversation roles must alternate");
    EXPECT_ERR("{{ x + 1 }}", NULL, "undefined");
    EXPECT_ERR("{{ 1 // 0 }}", NULL, "division by zero");
    EXPECT_ERR("{{ [1]|trim }}", NULL, "filter 'trim' cannot be applied to a list");
    EXPECT_ERR("{{ 1 is wat }}", NULL, "unknown test 'wat'");
    EXPECT_ERR("{% set x.y = 1 %}", NULL, "namespace");
    EXPECT_ERR("{% break %}", NULL, "outside a loop");
    EXPECT_ERR("{{ [1]|tojson(indent=1)[1:] }}", NULL, "a filter must be a name");   /* found by fuzz_template */
    EXPECT_ERR("{{ (((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
               "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1 }}",
               NULL, "nesting is too deep");
    /* a bad template never leaks or crashes: parse errors from an injected allocation failure */
    kw_err err;
    kw_mem_fail_nth(1);
    kw_template *t = kw_template_parse("{{ 1 }}", &err);
    kw_mem_fail_nth(0);
    KW_CHECK(t == NULL && strstr(err.msg, "memory"));
    kw_template_free(t);
}

static void test_limits(void) {
    kw_err err = {{0}};
    kw_template *t = kw_template_parse("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", &err);
    KW_CHECK(t != NULL);
    kw_template_limits lim = kw_template_default_limits();
    lim.max_steps = 100000;
    char *out = NULL;
    KW_CHECK(kw_template_render_ex(t, NULL, &lim, &out, NULL, &err) == -1 && strstr(err.msg, "steps"));
    lim = kw_template_default_limits();
    lim.max_output_bytes = 1000;
    KW_CHECK(kw_template_render_ex(t, NULL, &lim, &out, NULL, &err) == -1 && strstr(err.msg, "output exceeds"));
    kw_template_free(t);

    t = kw_template_parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", &err);
    KW_CHECK(t != NULL);
    KW_CHECK(kw_template_render(t, NULL, &out, &err) == -1 && strstr(err.msg, "nest"));
    kw_template_free(t);

    t = kw_template_parse("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", &err);
    KW_CHECK(t != NULL);
    lim = kw_template_default_limits();
    lim.max_memory_bytes = 8u << 20;
    KW_CHECK(kw_template_render_ex(t, NULL, &lim, &out, NULL, &err) == -1 && strstr(err.msg, "bytes"));
    kw_template_free(t);

    /* the output has an accounted allocation and a length */
    t = kw_template_parse("{{ 'a' }}b", &err);
    size_t len = 0;
    KW_CHECK(kw_template_render_ex(t, NULL, NULL, &out, &len, &err) == 0 && len == 2 && strcmp(out, "ab") == 0);
    KW_CHECK(kw_mem_size(out) >= 3);
    kw_template_output_free(out);
    kw_template_free(t);
    /* a context that is not an object is refused */
    cJSON *arr = cJSON_CreateArray();
    t = kw_template_parse("x", &err);
    KW_CHECK(kw_template_render(t, arr, &out, &err) == -1 && strstr(err.msg, "object"));
    kw_template_free(t);
    cJSON_Delete(arr);
}

static void test_probe(void) {
    kw_err err;
    /* ChatML-style with tools and object arguments (tojson) */
    kw_template *t = kw_template_parse(
        "{% if tools %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif %}"
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% for c in m.tool_calls|default([]) %}{{ c.function.arguments|tojson }}{% endfor %}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% if enable_thinking is false %}<think></think>{% endif %}{% endif %}", &err);
    kw_template_caps k;
    kw_template_probe(t, &k);
    KW_CHECK(k.system_role && k.tools && k.tool_calls && k.object_arguments && k.tool_results && k.enable_thinking);
    KW_CHECK(!k.reasoning_content);
    kw_template_free(t);
    /* concatenates arguments: only a JSON string works; raises on system */
    t = kw_template_parse(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}"
        "{% for c in m.tool_calls|default([]) %}{{ '<call>' + c.function.arguments }}{% endfor %}{% endfor %}", &err);
    kw_template_probe(t, &k);
    KW_CHECK(!k.system_role && !k.tools && k.tool_calls && !k.object_arguments && !k.tool_results && !k.enable_thinking);
    kw_template_free(t);
    kw_template_probe(NULL, &k);
    KW_CHECK(!k.system_role && !k.tool_calls);
}

int main(void) {
    test_probe();
    test_text_and_whitespace();
    test_literals_and_ops();
    test_access_and_slices();
    test_statements();
    test_filters();
    test_tojson();
    test_tests_and_methods();
    test_errors();
    test_limits();
    return kw_test_finish();
}

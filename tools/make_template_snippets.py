#!/usr/bin/env python3
"""Make tests/data/templates/snippets_expected.json: small Jinja programs, one feature each,
rendered by real jinja2 set up as Hugging Face's apply_chat_template (the Renderer of
tools/make_template_cases.py). tests/unit/template/test_template.c renders each with spindle's
engine and expects the same bytes, or a failure where jinja2 fails.

Usage (from the repository root; deterministic):
    python3 tools/make_template_snippets.py [--check]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_template_cases import FIXED_CLOCK, Renderer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_PATH = os.path.join(REPO, "tests", "data", "templates", "snippets_expected.json")

MSGS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
    {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "image"}, {"type": "text", "text": "two"}]},
]
CTX = {"messages": MSGS, "s": "  Hello World  ", "n": 7, "f": 2.5, "xs": [3, 1, 2], "d": {"b": 1, "a": [1, 2], "c": None},
       "t": True, "none": None, "empty": "", "words": ["apple", "Banana", "cherry", "apple"],
       "tools": [{"type": "function", "function": {"name": "get", "description": "Get it", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]}

# (name, template); every one renders with CTX
SNIPPETS = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    ("text_only", "plain text\nwith lines\n"),
    ("trailing_newline_dropped_once", "a\n\n"),
    ("crlf_newlines", "a\r\nb\rc{% if t %}\r\nd{% endif %}"),
    ("trim_blocks", "{% if t %}\nyes\n{% endif %}\nafter"),
    ("lstrip_blocks", "line\n    {% if t %}\n    inner\n    {% endif %}\nend"),
    ("lstrip_not_for_vars", "x\n    {{ n }}\n"),
    ("lstrip_plus_keeps", "x\n    {%+ if t %}y{% endif %}"),
    ("minus_strips_both", "a   \n  {%- if t -%}  \n  b  {%- endif -%}   \n c"),
    ("var_minus", "a  {{- n -}}  b"),
    ("comment", "a {# note #} b\n  {# own line #}\nc"),
    ("comment_minus", "a  {#- note -#}  b"),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}"),
    ("raw_minus", "a {%- raw -%}  {{ x }}  {%- endraw -%} b"),
    ("tag_mid_line_not_stripped", "a {% if t %}b{% endif %} c"),
    ("first_line_lstrip", "   {% if t %}x{% endif %}"),
    ("plus_end_keeps_newline", "{% if t +%}\nx{% endif %}"),
    # literals and printing
    ("print_types", "{{ 1 }} {{ 1.0 }} {{ 2.5e-7 }} {{ 1e16 }} {{ 123456789.123 }} {{ true }} {{ none }} {{ 'x' }} {{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': 1} }} {{ (1,) }} {{ (1, 2) }}"),
    ("print_undefined", "[{{ nothing }}][{{ d.missing }}][{{ messages[99] }}]"),
    ("string_escapes", "{{ 'a\\nb\\tc\\\\d\\'e' }}|{{ \"q\\\"q\" }}|{{ '\\u00e9\\x41' }}|{{ 'x' 'y' }}"),
    ("float_repr", "{{ 0.1 + 0.2 }} {{ 1/3 }} {{ 10/2 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 3.0 * 2 }}"),
    ("unicode_text", "héllo ✓ 🙂 {{ 'ünïcode' }}"),
    # expressions
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -n }} {{ n - 10 }}"),
    ("string_ops", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 'x' ~ 1 ~ none ~ true }} {{ [1] + [2, 3] }}"),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != '1' }} {{ [1, 2] == [1, 2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"),
    ("logic", "{{ t and 'yes' }} {{ none or 'fallback' }} {{ not t }} {{ 0 or [] or 'last' }} {{ t and none }}"),
    ("in_operator", "{{ 'ell' in 'hello' }} {{ 2 in xs }} {{ 'b' in d }} {{ 'z' not in d }} {{ 'x' in nothing }}"),
    ("conditional_expr", "{{ 'y' if t else 'n' }} {{ 'y' if none else 'n' }} [{{ 'y' if none }}]"),
    ("subscripts", "{{ xs[0] }} {{ xs[-1] }} {{ d['b'] }} {{ d.b }} {{ messages[1].content }} {{ messages[1]['role'] }} {{ s[2] }}"),
    ("slices", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ messages[1:][0].role }} {{ xs[5:] }} {{ xs[-10:1] }}"),
    ("precedence_filter_unary", "{{ -1|abs }} {{ 1 + xs|length }} {{ 'a' ~ xs|length }}"),
    ("dict_literal_nested", "{{ {'a': {'b': [1, {'c': 2}]}}['a']['b'][1].c }}"),
    # statements
    ("if_elif_else", "{% for i in [1, 2, 3] %}{% if i == 1 %}one{% elif i == 2 %}two{% else %}many{% endif %} {% endfor %}"),
    ("for_loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}"),
    ("for_prev_next", "{% for x in xs %}[{{ loop.previtem }},{{ loop.nextitem }}]{% endfor %}"),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}"),
    ("for_inline_if", "{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}"),
    ("for_tuple_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}"),
    ("for_string", "{% for c in 'héy' %}[{{ c }}]{% endfor %}"),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("for_cycle", "{% for x in xs %}{{ loop.cycle('a', 'b') }}{% endfor %}"),
    ("for_nested_loop", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}"),
    ("set_scoping_in_loop", "{% set x = 1 %}{% for i in xs %}{% set x = i %}{% endfor %}{{ x }}"),
    ("set_in_if", "{% if t %}{% set y = 5 %}{% endif %}{{ y }}"),
    ("namespace", "{% set ns = namespace(found=false, count=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.count = ns.count + 1 %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.count }}"),
    ("set_block", "{% set block %}A{{ n }}B{% endset %}[{{ block }}]"),
    ("set_block_filtered", "{% set block | upper %}abc{% endset %}{{ block }}"),
    ("set_tuple", "{% set a, b = [1, 2] %}{{ a }}{{ b }}"),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}"),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}"),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}"),
    ("macro_closure", "{% set g = 'outer' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ n }}{% endcall %}"),
    ("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each(xs) %}[{{ x }}]{% endcall %}"),
    ("filter_block", "{% filter upper %}shout {{ n }}{% endfilter %}"),
    ("generation_block", "{% generation %}gen {{ n }}{% endgeneration %}"),
    # filters
    ("f_trim", "[{{ s|trim }}][{{ 'xxhixx'|trim('x') }}][{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'abcba'.strip('ab') }}]"),
    ("f_tojson", "{{ d|tojson }} {{ messages[2]|tojson }} {{ 'é\"\\n'|tojson }} {{ [1.5, none, true]|tojson }}"),
    ("f_tojson_indent", "{{ tools|tojson(indent=4) }}\n{{ d|tojson(indent=2) }}\n{{ {}|tojson(indent=2) }}{{ []|tojson(indent=2) }}"),
    ("f_tojson_options", "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ 'é🙂\x01'|tojson(ensure_ascii=true) }} {{ [1, 2]|tojson(false, 1) }}"),
    ("f_length", "{{ xs|length }} {{ s|length }} {{ d|length }} {{ 'héllo'|length }} {{ nothing|length }} {{ xs|count }}"),
    ("f_case", "{{ 'hELLO wORLD'|upper }} {{ 'Hello'|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world (x)'|title }} {{ 'hello big-world'.title() }} {{ 'aBc'.upper() }} {{ 'aBc'.lower() }}"),
    ("f_replace", "{{ 'a-b-c'|replace('-', '+') }} {{ 'a-b-c'|replace('-', '', 1) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }}"),
    ("f_join", "{{ xs|join(', ') }} {{ words|join }} {{ messages|join(',', attribute='role') }}"),
    ("f_default", "{{ nothing|default('dflt') }} {{ none|default('dflt') }} {{ empty|default('dflt', true) }} {{ n|d(0) }}"),
    ("f_first_last", "{{ xs|first }} {{ xs|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}]"),
    ("f_list_items", "{{ 'ab'|list }} {{ d|list }} {{ d|items|list }} {{ d.keys()|list }} {{ d.values()|list }}"),
    ("f_string_int_float", "{{ 12|string ~ 'x' }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ '2.5'|float }} {{ 'bad'|float }} {{ 3|float }}"),
    ("f_round_abs", "{{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }} {{ -3|abs }} {{ -2.5|abs }}"),
    ("f_map_select", "{{ messages|map(attribute='role')|list }} {{ words|map('upper')|list }} {{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }}"),
    ("f_selectattr", "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|join(',') }} {{ messages|selectattr('tool_calls')|list|length }} {{ messages|selectattr('tool_calls', 'defined')|map(attribute='role')|first }}"),
    ("f_unique", "{{ words|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }}"),
    ("f_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\n'|indent(3) }}|"),
    ("f_batch", "{{ xs|batch(2)|list }} {{ xs|batch(2, 'x')|list }}"),
    ("f_safe_escape", "{{ '<b>'|safe }} {{ '<a href=\"x\">&</a>'|escape }} {{ \"it's\"|e }}"),
    ("f_sort_reverse", "{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ xs|reverse|list }} {{ 'abc'|reverse }} {{ messages|sort(attribute='role')|map(attribute='role')|join(',') }}"),
    ("f_dictsort_sum_min_max", "{{ d|dictsort }} {{ xs|sum }} {{ [1.5, 2]|sum }} {{ xs|min }} {{ xs|max }} {{ words|max }} {{ messages|sum(attribute='nothing', start=0) if false else 0 }}"),
    ("f_wordcount_center", "{{ 'a b  c'|wordcount }} [{{ 'ab'|center(6) }}] [{{ 'abc'|center(6) }}]"),
    ("generator_truthy", "{% if []|select %}generator is truthy{% endif %} {{ xs|select('odd')|list|length }}"),
    ("generator_one_pass", "{% set g = xs|select('odd') %}{{ g|list }}{{ g|list }}"),
    # tests
    ("tests_types", "{{ nothing is defined }} {{ n is defined }} {{ nothing is undefined }} {{ none is none }} {{ n is number }} {{ f is float }} {{ n is integer }} {{ t is boolean }} {{ t is number }} {{ s is string }} {{ d is mapping }} {{ xs is iterable }} {{ s is iterable }} {{ n is iterable }} {{ xs is sequence }} {{ d is sequence }} {{ nothing is iterable }}"),
    ("tests_values", "{{ t is true }} {{ 1 is true }} {{ false is false }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'x' is equalto 'x' }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 2 is in xs }} {{ none is sameas none }} {{ 3 is gt 2 }} {{ 3 is lt 2 }} {{ 'upper' is filter }} {{ 'odd' is test }}"),
    ("tests_negated", "{{ n is not none }} {{ nothing is not defined }} {{ s is not string }} {{ messages[0].content is not string }}"),
    ("tests_callable", "{{ range is callable }} {{ s.strip is callable }} {{ n is callable }}"),
    # methods
    ("str_methods", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }} {{ '12'.isdigit() }} {{ ' '.isspace() }} {{ 'abc'.capitalize() }}"),
    ("str_format", "{{ '{} and {}'.format('a', 1) }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='N') }} {{ '{{}}'.format() }}"),
    ("dict_methods", "{{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 'dv') }} {{ d.items()|list }} {{ d.keys()|list }}"),
    # globals
    ("range", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}"),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict(d, z=0)|length }}"),
    ("namespace_repr_attr", "{% set ns = namespace(a=1) %}{{ ns.a }}{{ ns.missing }}"),
    # chat-template idioms
    ("content_parts", "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %}|{% endfor %}"),
    ("tool_call_args", "{% for tc in messages[2].tool_calls %}{{ tc.function.name }}({{ tc.function.arguments|tojson }}){% endfor %}"),
    ("messages_slice_system", "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}{{ sys }}|{{ loop_messages|length }}"),
    ("loop_last_generation", "{% for m in messages %}{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}{% if add_generation_prompt is defined and add_generation_prompt %}>{% endif %}"),
    ("reasoning_split", "{% set c = 'abc</think>\\n\\nanswer' %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}"),
    ("string_concat_in_loop", "{% set ns = namespace(out='') %}{% for w in words %}{% set ns.out = ns.out + w[0] %}{% endfor %}{{ ns.out }}"),
    ("is_defined_chain", "{{ messages[2].tool_calls is defined }} {{ messages[0].tool_calls is defined }} {{ tools is not none and tools|length > 0 }}"),
    # review probes: scoping, Python str semantics, numbers, less common filters and methods
    ('macro_late_global', "{% macro m() %}[{{ g }}]{% endmacro %}{% set g = 'late' %}{{ m() }}"),
    ('macro_reassigned_global', "{% set g = 'early' %}{% macro m() %}[{{ g }}]{% endmacro %}{% set g = 'late' %}{{ m() }}"),
    ('set_persists_across_iterations', "{% for i in xs %}{% if loop.first %}{% set y = 'set' %}{% endif %}[{{ y }}]{% endfor %}"),
    ('set_loop_read_before_shadow', "{% set x = 'o' %}{% for i in xs %}{{ x }}{% set x = i %}{{ x }}|{% endfor %}{{ x }}"),
    ('macro_set_local', "{% set x = 1 %}{% macro m() %}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}"),
    ('macro_in_loop_sees_loopvar', "{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}"),
    ('repr_nonprintable', "{{ ['a\\u00a0b', 'c\\u200bd', 'e\\x85', '\\u2028'] }}"),
    ('unicode_whitespace_strip', "[{{ '\\u3000x\\u00a0'|trim }}][{{ '\\u2003y\\u2003'.strip() }}][{{ 'a\\u3000b'.split() }}]"),
    ('unicode_case', "{{ 'ÉCOLE'|lower }} {{ 'straße'|upper }} {{ 'élan'|title }} {{ 'élan'|capitalize }} {{ 'ÀB'.lower() }}"),
    ('find_non_ascii', "{{ 'héllo'.find('l') }} {{ 'héllo'[:'héllo'.find('l')] }}"),
    ('split_maxsplit_ws', "{{ ' a b c '.split(none, 1) }} {{ 'a  b  '.split(none, 1) }}"),
    ('percent_format', "{{ '%s-%d' % ('a', 3) }}"),
    ('format_filter', "{{ '%s is %d'|format('x', 3) }}"),
    ('wordcount_regex', "{{ 'a-b, c!'|wordcount }}"),
    ('reverse_one_pass', "{% set r = xs|reverse %}{{ r|list }}{{ r|list }}"),
    ('int_float_hex', "{{ '0x1A'|int }} {{ '0x10'|float }} {{ '1_000'|float }} {{ '1__0'|int }}"),
    ('tuple_trailing_comma', "{{ 1, }}|{{ (1,) }}"),
    ('float_repr_list', "{{ [1e16, 1.5e-5, 0.1, 1e22, 123456789012345678.0] }}"),
    ('tojson_del_ascii', "{{ '\\x7f'|tojson(ensure_ascii=true) }}"),
    ('tojson_indent_str', "{{ [1]|tojson(indent='\\t') }}"),
    ('floordiv_float', "{{ 1 // 0.1 }} {{ -7 // 2.0 }} {{ 7.5 % -2 }} {{ -0.0 % 5 }}"),
    ('round_cases', "{{ 2.675|round(2) }} {{ 1234|round(-2) }} {{ 0.5|round }} {{ 1.5|round }} {{ -2.5|round }}"),
    ('nbsp_before_minus', "a {%- if t %}b{% endif %}"),
    ('hex_literal', "{{ 0x1F }} {{ 0o17 }} {{ 0b11 }} {{ 1_000 }}"),
    ('pow_assoc', "{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 2 ** -1 }}"),
    ('test_arg_name_if', "{{ 'a' if xs is iterable else 'b' }}"),
    ('loop_var_after_loop', "{% for i in xs %}{% endfor %}[{{ i }}]"),
    ('nested_loop_set', "{% for a in [1,2] %}{% for b in [3] %}{% set z = a %}{% endfor %}[{{ z }}]{% endfor %}"),
    ('ns_in_macro', "{% set ns = namespace(v=1) %}{% macro m() %}{% set ns.v = 2 %}{% endmacro %}{{ m() }}{{ ns.v }}"),
    ('undefined_eq', "{{ nothing == nothing2 }} {{ nothing == none }} {{ not nothing }} {{ nothing is none }}"),
    ('unpack_string', "{% set a, b = 'xy' %}{{ a }}{{ b }}"),
    ('tuple_concat', "{{ (1, 2) + (3,) }} {{ [1, 2] * 2 }} {{ (1,) * 2 }}"),
    ('dict_dup_keys', "{{ {'a': 1, 'a': 2} }}"),
    ('str_methods_more', "{{ 'a b'.rsplit(' ', 1) }} {{ 'abc'.index('b') }} {{ 'x'.zfill(3) }} {{ 'ab'.ljust(4) }}|{{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ 'ab'.islower() }} {{ 'a\\nb'.splitlines() }} {{ 'abc'.removeprefix('a') }} {{ 'a=b'.partition('=') }} {{ 'abc'.rfind('c') }} {{ 'Ab'.swapcase() }}"),
    ('dict_methods_more', "{{ d.copy() }} {{ d.pop is defined }}"),
    ('list_methods', "{{ xs.index(2) }} {{ xs.count(1) }}"),
    ('strip_multibyte_chars', "[{{ 'éaè'.strip('è') }}]"),
    ('repr_quotes', "{{ [\"it's\", 'say \"hi\"', 'both \\' \"'] }}"),
    ('filter_then_attr', "{{ (messages|first).role }}"),
    ('string_iter_unicode_slice', "{{ '日本語'[1] }} {{ '日本語'|length }} {{ '日本語'[::-1] }}"),
    ('compare_chain_eval', "{{ 1 < 2 > 1 }}"),
    ('in_generator', "{{ 3 in xs|select('odd') }}"),
    ('bool_arith', "{{ true + 1 }} {{ true * 'ab' }}"),
    ('int_division_big', "{{ 9007199254740993 / 1 }}"),
    ('map_default', "{{ messages|map(attribute='tool_calls', default='none')|list|length }}"),
    ('set_in_filter_block', "{% filter upper %}{% set q = 'a' %}{{ q }}{% endfilter %}[{{ q }}]"),
    ('set_in_set_block', "{% set b %}{% set q = 'a' %}{% endset %}[{{ q }}]"),
    ('set_in_call_body', "{% macro w() %}{{ caller() }}{% endmacro %}{% call w() %}{% set q = 'a' %}{{ q }}{% endcall %}[{{ q }}]"),
    ('set_in_generation', "{% generation %}{% set q = 'a' %}{{ q }}{% endgeneration %}[{{ q }}]"),
    ('loop_filter_fresh_scope', "{% set x = 'o' %}{% for i in xs if i > 1 %}{{ x }}{% set x = i %}{% endfor %}"),
    ('loop_else_scope', "{% for i in [] %}{% else %}{% set q = 1 %}{% endfor %}[{{ q }}]"),
    ('nested_loop_outer_loop_var', "{% for a in [1, 2] %}{% set outer = loop %}{% for b in [3, 4] %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}"),
    ('macro_default_refers_param', "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}"),
    ('macro_caller_undefined', "{% macro m() %}[{{ caller is defined }}]{% endmacro %}{{ m() }}"),
    ('loop_in_macro_in_loop', "{% macro m() %}{{ loop is defined }}{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}"),
    ('for_target_shadows_then_restored', "{% set i = 'outer' %}{% for i in xs %}{% endfor %}{{ i }}"),
    ('ns_set_in_nested_loops', "{% set ns = namespace(n=0) %}{% for a in xs %}{% for b in xs %}{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}"),
    ('if_set_visible_after', "{% for m in messages %}{% if m.role == 'user' %}{% set last = m.content %}{% endif %}{{ last is defined }}{% endfor %}"),
    ('loop_changed', "{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}"),
    ('loop_revindex_filter', "{% for x in xs if x != 1 %}{{ loop.revindex }}{{ loop.last }}{% endfor %}"),
    ('print_tuple_expr', "{{ 1, 'a' }}"),
    ('concat_float_int', "{{ 1.0 ~ 2 ~ 1e100 ~ 0.000001 }}"),
    ('repr_in_dict', "{{ {'a': 'x\\ny', 1: 2.0, none: true} }}"),
    ('tojson_non_str_keys', "{{ {1: 2, none: 3, true: 4, 2.5: 5}|tojson }}"),
    ('tojson_tuple_nested', "{{ (1, (2, 'b'))|tojson }}"),
    ('tojson_float_forms', "{{ [1.0, 1e16, 1e-7, 0.1, -0.0, 100.0]|tojson }}"),
    ('tojson_control_chars', "{{ '\\x00\\x1f\\u2028\\ud7ff'|tojson }}"),
    ('json_separators_indent', "{{ d|tojson(indent=2, separators=(',', ': ')) }}|{{ d|tojson(indent=0) }}"),
    ('items_on_ns_error_free', "{{ d|items|list|length }}"),
    ('default_undefined_attr', "{{ messages[0].nothing|default('dflt') }} {{ none|default('x') }} {{ false|d('y', true) }}"),
    ('join_non_str', "{{ [1, none, true, 2.5]|join('-') }}"),
    ('str_join_method_gen', "{{ ','.join(words|unique) }}"),
    ('select_equalto_kw', "{{ messages|selectattr('role', '==', 'user')|map(attribute='role')|join }}"),
    ('selectattr_in', "{{ messages|selectattr('role', 'in', ['user', 'system'])|list|length }}"),
    ('reject_none', "{{ [1, none, 2]|reject('none')|list }}"),
    ('map_int', "{{ ['1', '2']|map('int')|sum }}"),
    ('sort_attribute_multi', "{{ [{'a': 2, 'b': 1}, {'a': 1, 'b': 2}]|sort(attribute='a,b')|map(attribute='b')|list }}"),
    ('sort_mixed_case', "{{ ['b', 'A', 'a', 'B']|sort }} {{ ['b', 'A', 'a', 'B']|sort(case_sensitive=true) }}"),
    ('dictsort_value', "{{ {'x': 2, 'y': 1}|dictsort(by='value') }}"),
    ('max_attribute', "{{ [{'v': 1}, {'v': 3}]|max(attribute='v') }}"),
    ('min_strings_case', "{{ ['b', 'A']|min }}"),
    ('length_of_generator', "{{ xs|map('string')|list|length }}"),
    ('string_filter_list', "{{ xs|string }} {{ none|string }} {{ 1.0|string }}"),
    ('lower_on_non_str', "{{ 1|lower }} {{ none|upper }}"),
    ('trim_chars', "{{ '--a--'|trim('-') }}"),
    ('replace_count_kw', "{{ 'aaa'|replace('a', 'b', count=2) }}"),
    ('indent_first_blank', "{{ 'a\\n\\nb\\n'|indent(2, true, true) }}|"),
    ('indent_width_str', "{{ 'a\\nb'|indent('> ') }}"),
    ('center_odd', "[{{ 'a'|center(4) }}][{{ 'ab'|center(5) }}]"),
    ('truncate_filter', "{{ 'hello world foo'|truncate(9) }}"),
    ('attr_filter', "{{ d|attr('b') }}"),
    ('split_no_args_newlines', "{{ 'a\\n b\\t c'.split() }}"),
    ('strip_none_arg', "{{ ' a '.strip(none) }}"),
    ('format_method_numbers', "{{ '{} {} {}'.format(1.5, none, [1]) }}"),
    ('format_spec', "{{ '{:>5}|{:.2f}'.format('a', 3.14159) }}"),
    ('undefined_in_list_repr', "{{ [nothing] }}"),
    ('print_macro', "{% macro m() %}{% endmacro %}{{ m }}"),
    ('subscript_string_key_on_list', "{{ xs['a'] }}|{{ xs.0 }}"),
    ('slice_negative_step', "{{ xs[-1:0:-1] }} {{ xs[5:-10:-1] }} {{ 'abc'[10:] }}"),
    ('slice_bool_index', "{{ xs[true] }}"),
    ('int_filter_bool_float', "{{ true|int }} {{ -3.7|int }} {{ ' 42 '|int }} {{ '+7'|int }} {{ '1e3'|int }}"),
    ('float_filter_forms', "{{ ' 2.5 '|float }} {{ '1e3'|float }} {{ 'inf'|float }} {{ 'nan'|float }} {{ '-0'|float }}"),
    ('comparison_bool_int', "{{ true == 1 }} {{ true is sameas 1 }} {{ 1 is sameas 1 }}"),
    ('sameas_strings', "{{ 'a' is sameas 'a' }}"),
    ('odd_float', "{{ 3.0 is odd }} {{ 4.0 is even }}"),
    ('in_dict_values', "{{ 1 in d.values() }} {{ 'a' in d.keys() }}"),
    ('contains_nested_list', "{{ [1, 2] in [[1, 2]] }} {{ (1, 2) in [[1, 2]] }}"),
    ('loop_length_dict', "{% for k in d %}{{ loop.length }}{% endfor %}"),
    ('unicode_lstrip_blocks', "x\n　{% if t %}y{% endif %}"),
    ('tab_lstrip_blocks', "x\n\t {% if t %}y{% endif %}"),
    ('formfeed_lstrip', "x\n\f{% if t %}y{% endif %}"),
    ('comment_lstrip_trim', "a\n  {# c #}\nb"),
    ('raw_trim_blocks', "{% raw %}\nx{% endraw %}\ny"),
    ('var_end_minus_newline', "{{ n -}}\n\n  {% if t %}z{% endif %}"),
    ('block_end_plus', "{% if t +%}\n  x{%+ endif %}"),
    ('whitespace_after_minus_block_lstrip', "a\n  {%- if t %}\n  b\n  {%- endif %}\n"),
    ('block_in_middle_of_line_lstrip', "a {% if t %}\n  {% endif %}b"),
    ('newline_after_var_kept', "{{ n }}\n{{ n }}"),
    ('multi_line_tag', "{% if\n t\n %}\nok{% endif %}"),
    ('crlf_trim_blocks', "{% if t %}\r\nx\r\n{% endif %}\r\ny"),
    ('tuple_repeat', "{{ (1, 2) * 2 }}"),
    ('batch_print_len', "{{ xs|batch(2)|list|length }}"),
    ('slice_huge_step', "{{ xs[2::9223372036854775806] }}|{{ xs[0::9223372036854775807] }}"),
    ('pow_zero_one_big', "{{ 1 ** 62 }} {{ 0 ** 62 }} {{ (-1) ** 63 }}"),
]

SNIPPETS += [
    ("format_spec_more", "{{ '{:<6}|{:^7}|{:+d}|{:05d}|{:,}|{:x}|{:#x}|{:.3}|{:e}|{:10.2%}|{:*>4}|{:_}'.format('ab', 'mid', 5, 42, 1234567, 255, 255, 1.0, 12345.678, 0.256, 'z', 1000000) }}"),
    ("percent_format_more", "{{ '%5s|%-5s|%05.1f|%x|%r|%%|%c' % ('a', 'b', 3.14159, 255, 'q', 65) }} {{ '%(a)s-%(b)d' % {'a': 'x', 'b': 2} }} {{ '%s' % 'one' }}"),
    ("truncate_more", "{{ 'hello world foo bar'|truncate(12) }}|{{ 'hello world foo bar'|truncate(12, true) }}|{{ 'short'|truncate(3) }}|{{ 'abcdefghij'|truncate(5, end='~', leeway=0) }}"),
    ("number_parsing_more", "{{ '  42  '|int }} {{ '-0x1F'|int(0, 16) }} {{ '1e3'|int }} {{ 'inf'|float }} {{ '  -1.5e2 '|float }} {{ '1_2.5'|float }} {{ '0b101'|int(0, 0) }} {{ '12abc'|int(-1) }}"),
    ("round_more", "{{ 3.14159|round(3) }} {{ 2.5|round }} {{ 3.5|round }} {{ 1250|round(-2) }} {{ 1350|round(-2) }} {{ 2.1|round(1, 'floor') }} {{ -2.5|round(0, 'ceil') }}"),
    ("loop_changed_more", "{% for m in messages %}{% if loop.changed(m.role) %}[{{ m.role }}]{% endif %}{% endfor %}"),
    ("scope_nested_loops", "{% set x = 0 %}{% for a in [1, 2] %}{% set x = x + a %}{% for b in [10] %}{% set x = x + b %}{{ x }},{% endfor %}{{ x }};{% endfor %}{{ x }}"),
    ("macro_with_varargs_kwargs_used", "{% macro m(a) %}{{ a }}{{ varargs|length }}{{ kwargs|length }}{% endmacro %}{{ m(1, 2, 3, x=1) }}"),
    ("break_in_nested_if", "{% for i in range(5) %}{% if i > 1 %}{% if true %}{% break %}{% endif %}{% endif %}{{ i }}{% endfor %}"),
    ("tojson_ensure_ascii_del", "{{ 'a\x7fb'|tojson }} {{ 'a\x7fb'|tojson(ensure_ascii=true) }} {{ {'k': [1, {'z': none}]}|tojson(indent='--') }}"),
    ("reverse_kinds", "{{ xs|reverse|list }} {{ (xs|select('odd'))|reverse|list }} {{ d|reverse|list }} {{ 'abc'|reverse }}"),
    ("int_pow_and_divmod", "{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 3 ** 0 }} {{ 0 ** 0 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -7.5 // 2 }} {{ 7.5 % -2 }} {{ 2 ** -1 }}"),
    ("elif_chain", "{% for i in range(6) %}{% if i == 0 %}a{% elif i == 1 %}b{% elif i == 2 %}c{% elif i == 3 %}d{% elif i == 4 %}e{% else %}z{% endif %}{% endfor %}"),
    ("test_arg_forms", "{{ 4 is divisibleby 2 }} {{ 'a' is in 'cat' }} {{ 3 is gt(2) }} {{ none is sameas none }} {{ 1 is eq 1.0 }}"),
]

# (name, template): jinja2 fails on each; the C engine must fail too
FAILING = [
    ("percent_not_enough_args", "{{ '%s %s' % ('a',) }}"),
    ("percent_too_many_args", "{{ '%s' % ('a', 'b') }}"),
    ("test_too_many_args", "{{ 1 is odd(2) }}"),
    ("chained_tests", "{{ 1 is odd is odd }}"),
    ("raise_exception", "{{ raise_exception('custom message: ' ~ n) }}"),
    ("raise_in_branch", "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"),
    ("undefined_attr_of_undefined", "{{ nothing.attr }}"),
    ("undefined_call", "{{ nothing() }}"),
    ("undefined_arith", "{{ nothing + 1 }}"),
    ("add_str_int", "{{ 'a' + 1 }}"),
    ("add_str_none", "{{ 'a' + none }}"),
    ("compare_str_int", "{{ 'a' < 1 }}"),
    ("unknown_filter", "{{ n|nosuchfilter }}"),
    ("unknown_test", "{{ n is nosuchtest }}"),
    ("length_of_int", "{{ n|length }}"),
    ("tojson_generator", "{{ xs|select('odd')|tojson }}"),
    ("tojson_undefined", "{{ nothing|tojson }}"),
    ("iterate_none", "{% for x in none %}{% endfor %}"),
    ("iterate_int", "{% for x in n %}{% endfor %}"),
    ("set_attr_non_namespace", "{% set d.x = 1 %}"),
    ("division_by_zero", "{{ 1 / 0 }}"),
    ("range_too_big", "{{ range(1000000)|length }}"),
    ("syntax_unclosed_if", "{% if t %}x"),
    ("syntax_unclosed_var", "{{ n "),
    ("syntax_unknown_tag", "{% frobnicate %}"),
    ("syntax_stray_endfor", "{% endfor %}"),
    ("syntax_bad_expression", "{{ 1 + }}"),
    ("syntax_unclosed_string", "{{ 'abc }}"),
    ("syntax_unclosed_comment", "{# never closed"),
    ("syntax_unbalanced_paren", "{{ (1 + 2 }}"),
    ("not_callable", "{{ n() }}"),
    ("unary_minus_binds_before_filter", "{{ - xs|length }}"),
    ("unpack_mismatch", "{% for a, b in xs %}{% endfor %}"),
    # review probes: jinja2 refuses these
    ('last_of_generator', "{{ xs|select('odd')|last }}"),
    ('attr_path_through_undefined', "{{ messages|map(attribute='tool_calls.0')|list }}"),
    ('macro_too_many_args', "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
    ('macro_unknown_kwarg', "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}"),
    ('if_condexpr', "{% if 1 if t else 0 %}x{% endif %}"),
    ('test_then_if', "{{ n is number if t }}"),
    ('startswith_tuple_list', "{{ 'abc'.startswith(['x', 'a']) }}"),
    ('in_string_undefined', "{{ nothing in 'abc' }}"),
    ('break_outside_loop', "a{% break %}b"),
    ('continue_in_if_outside_loop', "a{% if t %}{% continue %}{% endif %}b"),
    ('break_in_macro_in_loop', "{% macro m() %}{% break %}{% endmacro %}{% for i in xs %}{{ m() }}{{ i }}{% endfor %}"),
]


def build():
    renderer = Renderer()
    cases = []
    for name, source in SNIPPETS + FAILING:
        fields, _ = renderer.render(source, CTX, FIXED_CLOCK)
        want_fail = (name, source) in FAILING
        if want_fail != ("error" in fields):
            sys.exit(f"snippet {name}: expected {'a failure' if want_fail else 'a render'}, jinja2 gave {fields}")
        if "strftime_now" in fields:
            sys.exit(f"snippet {name}: must not depend on the clock")
        cases.append({"name": name, "template": source, **fields})
    return {
        "generated_by": "tools/make_template_snippets.py",
        "jinja2_version": __import__("jinja2").__version__,
        "context": CTX,
        "cases": cases,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = ap.parse_args()
    text = json.dumps(build(), ensure_ascii=False, indent=1) + "\n"
    if args.check:
        with open(OUT_PATH, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit(f"{OUT_PATH} is out of date: run tools/make_template_snippets.py")
        print(f"{OUT_PATH} is current")
        return
    with open(OUT_PATH, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUT_PATH}")


if __name__ == "__main__":
    main()

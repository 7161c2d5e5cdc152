#!/usr/bin/env python3
"""gen_corpus.py - writes the JSON Schema corpus of tests/grammar/schemas/.

Shapes of real structured-output requests: classification labels,
extraction records, nested tool parameters, enums, arrays with bounds,
$ref/$defs (recursive too), anyOf/nullable, string formats and patterns,
integer and number ranges. Deterministic: re-running rewrites the same
files. Each shape is written by hand below; the variants change labels,
bounds and nesting so that the corpus covers the combinations."""
import json, os, random

OUT = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(41)
schemas = []

def add(name, s):
    schemas.append((name, s))

LABELSETS = [
    ["positive", "negative", "neutral"],
    ["spam", "ham"],
    ["bug", "feature", "question", "docs", "chore"],
    ["low", "medium", "high", "critical"],
    ["disclosed", "not_disclosed", "partially_disclosed", "unclear"],
    ["yes", "no"],
    ["en", "fr", "de", "es", "it", "pt", "nl", "zh", "ja"],
    ["billing", "technical", "account", "shipping", "returns", "other"],
    ["anger", "joy", "fear", "sadness", "surprise", "disgust"],
    ["A", "B", "C", "D"],
    ["safe", "unsafe: violence", "unsafe: self-harm", "unsafe: other"],
    ["Ünïcödé", "中文", "emoji 😀", "plain"],
]

# 1. classification: a label, optionally with confidence / rationale
for i, labels in enumerate(LABELSETS):
    add(f"classify_label_{i}", {"type": "object", "properties": {"label": {"type": "string", "enum": labels}},
                                "required": ["label"], "additionalProperties": False})
    add(f"classify_conf_{i}", {
        "type": "object",
        "properties": {"label": {"enum": labels},
                       "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                       "rationale": {"type": "string", "maxLength": 60 + 10 * i}},
        "required": ["label", "confidence"], "additionalProperties": False})
    add(f"classify_multi_{i}", {
        "type": "object",
        "properties": {"labels": {"type": "array", "items": {"type": "string", "enum": labels},
                                  "minItems": 1, "maxItems": len(labels)}},
        "required": ["labels"]})
    add(f"classify_bare_enum_{i}", {"enum": labels})

# 2. extraction records
FIELDS = [
    ("name", {"type": "string", "minLength": 1, "maxLength": 40}),
    ("age", {"type": "integer", "minimum": 0, "maximum": 130}),
    ("email", {"type": "string", "format": "email"}),
    ("birthday", {"type": "string", "format": "date"}),
    ("city", {"type": "string"}),
    ("score", {"type": "number"}),
    ("active", {"type": "boolean"}),
    ("tags", {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 5}),
    ("id", {"type": "string", "format": "uuid"}),
    ("zip", {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"}),
    ("phone", {"type": "string", "pattern": "^\\+?[0-9 ()-]{7,15}$"}),
    ("created_at", {"type": "string", "format": "date-time"}),
    ("count", {"type": "integer", "minimum": 1}),
    ("ratio", {"type": "number", "exclusiveMinimum": 0, "maximum": 100}),
    ("note", {"type": ["string", "null"], "maxLength": 80}),
    ("country", {"type": "string", "enum": ["US", "FR", "DE", "JP", "BR", "IN"]}),
    ("website", {"type": "string", "format": "uri"}),
    ("ip", {"type": "string", "format": "ipv4"}),
    ("time", {"type": "string", "format": "time"}),
    ("delta", {"type": "integer", "minimum": -50, "maximum": 50}),
    ("temp", {"type": "number", "minimum": -40, "maximum": 60}),
]
for i in range(40):
    k = 2 + i % 7
    pick = rng.sample(FIELDS, k)
    props = {n: s for n, s in pick}
    req = [n for n, _ in pick if rng.random() < 0.6] or [pick[0][0]]
    s = {"type": "object", "properties": props, "required": req}
    if i % 3 != 2:
        s["additionalProperties"] = False
    if i % 5 == 0:
        s = {"type": "array", "items": s, "minItems": 1, "maxItems": 4}
    add(f"extract_record_{i}", s)

# 3. tool parameters (nested objects, strict-style all required)
TOOLS = [
    ("get_weather", {"location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}),
    ("search", {"query": {"type": "string", "minLength": 1}, "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                "filters": {"type": "object", "properties": {"site": {"type": "string"}, "after": {"type": "string", "format": "date"}},
                            "required": ["site", "after"], "additionalProperties": False}}),
    ("send_email", {"to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1, "maxItems": 3},
                    "subject": {"type": "string", "maxLength": 80}, "body": {"type": "string"}}),
    ("create_event", {"title": {"type": "string"}, "start": {"type": "string", "format": "date-time"},
                      "duration_minutes": {"type": "integer", "minimum": 5, "maximum": 480},
                      "attendees": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "optional": {"type": "boolean"}},
                                                              "required": ["name", "optional"], "additionalProperties": False}}}),
    ("run_shell", {"command": {"type": "array", "items": {"type": "string"}, "minItems": 1}, "workdir": {"type": ["string", "null"]},
                   "timeout_ms": {"type": ["integer", "null"], "minimum": 0, "maximum": 600000}}),
    ("read_file", {"path": {"type": "string"}, "offset": {"type": "integer", "minimum": 0}, "limit": {"type": "integer", "minimum": 1, "maximum": 2000}}),
    ("edit_file", {"path": {"type": "string"}, "edits": {"type": "array", "items": {"type": "object", "properties": {
        "old_text": {"type": "string"}, "new_text": {"type": "string"}}, "required": ["old_text", "new_text"], "additionalProperties": False}, "maxItems": 3}}),
    ("sql_query", {"sql": {"type": "string", "maxLength": 300}, "params": {"type": "array", "items": {"type": ["string", "number", "boolean", "null"]}}}),
    ("translate", {"text": {"type": "string"}, "source": {"type": "string", "pattern": "^[a-z]{2}$"}, "target": {"type": "string", "pattern": "^[a-z]{2}$"}}),
    ("set_light", {"room": {"type": "string", "enum": ["kitchen", "living room", "bedroom"]}, "on": {"type": "boolean"},
                   "brightness": {"type": "integer", "minimum": 0, "maximum": 100},
                   "color": {"type": "object", "properties": {"r": {"type": "integer", "minimum": 0, "maximum": 255},
                                                            "g": {"type": "integer", "minimum": 0, "maximum": 255},
                                                            "b": {"type": "integer", "minimum": 0, "maximum": 255}},
                             "required": ["r", "g", "b"], "additionalProperties": False}}),
]
for i, (name, props) in enumerate(TOOLS):
    add(f"tool_{name}_strict", {"type": "object", "properties": props, "required": list(props), "additionalProperties": False})
    first = list(props)[:1]
    add(f"tool_{name}_loose", {"type": "object", "properties": props, "required": first})
    add(f"tool_{name}_wrapped", {"type": "object", "properties": {"name": {"const": name}, "arguments": {
        "type": "object", "properties": props, "required": list(props), "additionalProperties": False}},
        "required": ["name", "arguments"], "additionalProperties": False})

# 4. $ref / $defs, recursion
add("ref_person_address", {"$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                                                                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                                                "required": ["street", "city"], "additionalProperties": False}},
                           "type": "object", "properties": {"name": {"type": "string"}, "home": {"$ref": "#/$defs/address"},
                                                            "work": {"$ref": "#/$defs/address"}},
                           "required": ["name", "home"], "additionalProperties": False})
add("ref_tree", {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 9},
                                                                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                                   "required": ["value"], "additionalProperties": False}},
                 "$ref": "#/$defs/node"})
add("ref_definitions_linked_list", {"definitions": {"item": {"type": "object", "properties": {"v": {"type": "string", "maxLength": 5},
                                                                                           "next": {"anyOf": [{"$ref": "#/definitions/item"}, {"type": "null"}]}},
                                                          "required": ["v", "next"], "additionalProperties": False}},
                                    "$ref": "#/definitions/item"})
add("ref_root_recursion", {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                                           "sub": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}},
                           "required": ["name"], "additionalProperties": False})
add("ref_expression_ast", {"$defs": {
    "expr": {"anyOf": [{"$ref": "#/$defs/num"}, {"$ref": "#/$defs/bin"}]},
    "num": {"type": "object", "properties": {"kind": {"const": "num"}, "value": {"type": "integer", "minimum": -99, "maximum": 99}},
            "required": ["kind", "value"], "additionalProperties": False},
    "bin": {"type": "object", "properties": {"kind": {"const": "bin"}, "op": {"enum": ["+", "-", "*", "/"]},
                                             "left": {"$ref": "#/$defs/expr"}, "right": {"$ref": "#/$defs/expr"}},
            "required": ["kind", "op", "left", "right"], "additionalProperties": False}},
    "$ref": "#/$defs/expr"})
for i in range(12):
    d = {f"T{k}": {"type": "object", "properties": {f"f{k}": {"type": ["string", "integer", "boolean"][k % 3]}},
                   "required": [f"f{k}"], "additionalProperties": False} for k in range(i % 4 + 1)}
    props = {f"p{k}": {"$ref": f"#/$defs/T{k % len(d)}"} for k in range(i % 5 + 1)}
    add(f"ref_defs_{i}", {"$defs": d, "type": "object", "properties": props, "required": list(props)[: 1 + i % 3],
                          "additionalProperties": False})

# 5. anyOf / oneOf / nullable / type arrays / allOf
add("anyof_shapes", {"anyOf": [{"type": "object", "properties": {"circle": {"type": "number", "minimum": 0, "maximum": 10}}, "required": ["circle"], "additionalProperties": False},
                               {"type": "object", "properties": {"square": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["square"], "additionalProperties": False}]})
add("oneof_result", {"oneOf": [{"type": "object", "properties": {"ok": {"const": True}, "value": {"type": "string"}}, "required": ["ok", "value"], "additionalProperties": False},
                               {"type": "object", "properties": {"ok": {"const": False}, "error": {"type": "string", "maxLength": 40}}, "required": ["ok", "error"], "additionalProperties": False}]})
add("nullable_openapi", {"type": "object", "properties": {"a": {"type": "string", "nullable": True}, "b": {"type": "integer"}}, "required": ["a", "b"], "additionalProperties": False})
add("type_array_scalars", {"type": ["string", "number", "boolean", "null"]})
add("allof_merge", {"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999}}, "required": ["id"]}},
                    "allOf": [{"$ref": "#/$defs/base"}, {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}]})
add("pydantic_optional", {"title": "Model", "type": "object", "properties": {
    "name": {"title": "Name", "type": "string"},
    "nick": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Nick"},
    "age": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}},
    "required": ["name"]})

# 6. arrays
for i in range(16):
    mn = i % 4
    mx = mn + 1 + i % 5
    item = [{"type": "integer", "minimum": 0, "maximum": 1000}, {"type": "string", "maxLength": 10}, {"type": "boolean"},
            {"type": "object", "properties": {"k": {"type": "string", "enum": ["x", "y"]}}, "required": ["k"], "additionalProperties": False}][i % 4]
    add(f"array_bounds_{i}", {"type": "array", "items": item, "minItems": mn, "maxItems": mx})
add("array_prefix_items", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}], "items": False, "minItems": 2})
add("array_prefix_then_items", {"type": "array", "prefixItems": [{"const": "header"}], "items": {"type": "number"}, "maxItems": 4})
add("array_tuple_draft7", {"type": "array", "items": [{"type": "number", "minimum": -90, "maximum": 90}, {"type": "number", "minimum": -180, "maximum": 180}], "minItems": 2, "maxItems": 2})
add("array_of_arrays", {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 3, "maxItems": 3}, "minItems": 3, "maxItems": 3})
add("array_any", {"type": "array"})
add("array_unique_false", {"type": "array", "items": {"type": "string"}, "uniqueItems": False, "maxItems": 3})

# 7. strings and numbers
for i, pat in enumerate(["^[A-Z]{3}-[0-9]{3}$", "^(red|green|blue)$", "^[a-z]+(_[a-z]+)*$", "^v[0-9]+\\.[0-9]+\\.[0-9]+$",
                         "^#[0-9a-fA-F]{6}$", "^\\d{4}-\\d{2}$", "[0-9]", "^\\S+$", "^.{2,8}$", "^[^\"\\\\]{0,10}$",
                         "^(?:\\+|-)?\\d+(?:\\.\\d+)?$", "^[\\w.-]+$"]):
    add(f"string_pattern_{i}", {"type": "string", "pattern": pat})
for i, f in enumerate(["date", "date-time", "time", "uuid", "email", "ipv4", "hostname", "uri"]):
    add(f"string_format_{f}", {"type": "string", "format": f})
for i in range(8):
    add(f"string_len_{i}", {"type": "string", "minLength": i, "maxLength": i * 3 + 2})
for i, (lo, hi) in enumerate([(0, 10), (-5, 5), (100, 999), (-1000, -10), (0, 1), (7, 7), (-3, 12345), (1, 65535)]):
    add(f"integer_range_{i}", {"type": "integer", "minimum": lo, "maximum": hi})
    add(f"number_range_{i}", {"type": "number", "minimum": lo, "maximum": hi})
add("number_exclusive", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})
add("integer_exclusive_draft4", {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 10, "exclusiveMaximum": True})
add("number_plain", {"type": "number"})
add("integer_plain", {"type": "integer"})

# 8. generic objects / additional properties
add("object_any", {"type": "object"})
add("object_additional_schema", {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                                 "additionalProperties": {"type": "string", "maxLength": 6}})
add("object_additional_true", {"type": "object", "properties": {"id": {"type": "integer"}, "idx": {"type": "boolean"}},
                               "additionalProperties": True})
add("object_map", {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 99}})
add("any_value", {})
add("const_object", {"const": {"status": "ok", "code": 200, "tags": ["a", "b"]}})

# 9. documents
add("doc_invoice", {"type": "object", "properties": {
    "invoice_no": {"type": "string", "pattern": "^INV-[0-9]{6}$"}, "date": {"type": "string", "format": "date"},
    "currency": {"enum": ["EUR", "USD", "GBP"]},
    "lines": {"type": "array", "minItems": 1, "maxItems": 5, "items": {"type": "object", "properties": {
        "sku": {"type": "string", "maxLength": 12}, "qty": {"type": "integer", "minimum": 1, "maximum": 99},
        "unit_price": {"type": "number", "minimum": 0, "maximum": 10000}}, "required": ["sku", "qty", "unit_price"], "additionalProperties": False}},
    "paid": {"type": "boolean"}}, "required": ["invoice_no", "date", "currency", "lines", "paid"], "additionalProperties": False})
add("doc_disclosure", {"type": "object", "properties": {
    "company": {"type": "string", "maxLength": 60}, "year": {"type": "integer", "minimum": 1990, "maximum": 2030},
    "disclosed": {"enum": ["yes", "no", "partial"]}, "evidence": {"type": "array", "items": {"type": "string", "maxLength": 100}, "maxItems": 3},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["company", "year", "disclosed", "confidence"], "additionalProperties": False})
add("doc_recipe", {"type": "object", "properties": {"title": {"type": "string"}, "servings": {"type": "integer", "minimum": 1, "maximum": 12},
    "ingredients": {"type": "array", "items": {"type": "object", "properties": {"item": {"type": "string"}, "grams": {"type": ["number", "null"]}},
                                               "required": ["item", "grams"], "additionalProperties": False}, "maxItems": 6},
    "steps": {"type": "array", "items": {"type": "string", "maxLength": 80}, "minItems": 1, "maxItems": 4}},
    "required": ["title", "ingredients", "steps"], "additionalProperties": False})
add("doc_annotated", {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:example:annotated", "title": "T",
                      "description": "annotations are ignored", "examples": [{"a": 1}], "type": "object",
                      "properties": {"a": {"type": "integer", "description": "x", "default": 3, "deprecated": False, "readOnly": True}},
                      "required": ["a"], "additionalProperties": False, "$comment": "c"})

for i, (name, s) in enumerate(schemas):
    with open(os.path.join(OUT, f"{i:03d}_{name}.json"), "w") as f:
        json.dump(s, f, indent=1, ensure_ascii=False)
        f.write("\n")
print(len(schemas), "schemas")

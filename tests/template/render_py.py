#!/usr/bin/env python3
"""render_py.py TEMPLATE_FILE CONTEXT_JSON_FILE - renders a chat template with
Python Jinja2 the way Hugging Face transformers sets it up (sandboxed,
trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False) keeping
key order, raise_exception) and writes the text to stdout. Exit 3 when jinja2
is not installed, 2 when the template raises. Used by the conformance test as a
second reference where @huggingface/jinja cannot render a template."""
import json
import sys

try:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(3)


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
with open(sys.argv[1], encoding="utf-8") as f:
    template = env.from_string(f.read())
with open(sys.argv[2], encoding="utf-8") as f:
    context = json.load(f)
try:
    out = template.render(**context)
except Exception as e:  # noqa: BLE001 - any template failure is a render error
    sys.stderr.write(f"{type(e).__name__}: {e}\n")
    sys.exit(2)
sys.stdout.write(out)

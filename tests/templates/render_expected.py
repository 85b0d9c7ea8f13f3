#!/usr/bin/env python3
"""Renders every case in this directory with Jinja2 exactly as Hugging Face transformers
renders a chat template (transformers.utils.chat_template_utils._compile_jinja_template
and apply_chat_template), and writes CASE.expected.txt (or CASE.expected-error.txt).

The Rust test (tests/chat_templates.rs) renders the same cases with minijinja and must
produce byte-identical text. Regenerate with:  pip install jinja2 && python3 render_expected.py
"""
import json
import pathlib
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).parent


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override: no HTML escaping, insertion order, Python separators.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def load(case):
    path = (HERE / case["template"]).resolve()
    special = {k: v for k, v in case.get("special", {}).items() if v is not None}
    if path.suffix == ".json":  # a tokenizer_config.json: template and special tokens
        config = json.loads(path.read_text())
        source = config["chat_template"]
        for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
            if isinstance(config.get(name), str):
                special.setdefault(name, config[name])
    else:
        source = path.read_text()
    return source, special


for case_file in sorted(HERE.glob("*.json")):
    case = json.loads(case_file.read_text())
    source, special = load(case)
    template = compile_template(source)
    stem = case_file.with_suffix("")
    try:
        text = template.render(messages=case["messages"], tools=case["tools"], documents=None,
                               add_generation_prompt=case["add_generation_prompt"], **special)
        pathlib.Path(f"{stem}.expected.txt").write_text(text)
        print(f"{case_file.name}: {len(text)} characters")
    except jinja2.exceptions.TemplateError as e:
        pathlib.Path(f"{stem}.expected-error.txt").write_text(str(e))
        print(f"{case_file.name}: error: {e}")

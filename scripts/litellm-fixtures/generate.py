#!/usr/bin/env python3
"""A real LiteLLM standard logging payload for `conform import litellm`'s tests.

Calls `litellm.completion` (and one `litellm.embedding`) against the loopback mock of
../otel-fixtures/generate.py, with a CustomLogger that writes each call's
`kwargs["standard_logging_object"]` as a JSON line, as a log sink receives it. The mock
saves the request bodies LiteLLM really sent, next to the payloads.

    python3 scripts/litellm-fixtures/generate.py

writes tests/fixtures/litellm/standard_logging.jsonl and requests.jsonl. The virtual
environment (~/.cache/conform/litellm-fixtures) is built from requirements.txt.
"""

import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
OUT = REPO / "tests" / "fixtures" / "litellm"
CACHE = Path(os.environ.get("CONFORM_CACHE", Path.home() / ".cache" / "conform"))
sys.path.insert(0, str(HERE.parent / "otel-fixtures"))


def traffic():
    import generate as mock  # the otel fixtures' mock: same answers, same requests

    server = mock.serve()
    base = f"http://127.0.0.1:{server.server_port}/v1"
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    payloads = []

    class Sink(CustomLogger):
        def log_success_event(self, kwargs, response_obj, start_time, end_time):
            payloads.append(kwargs["standard_logging_object"])

        def log_failure_event(self, kwargs, response_obj, start_time, end_time):
            payloads.append(kwargs["standard_logging_object"])

    litellm.callbacks = [Sink()]
    call = dict(model="openai/gpt-4o-mini", api_base=base, api_key="sk-test-not-a-key")
    question = [
        {"role": "system", "content": mock.SYSTEM},
        {"role": "user", "content": "Please confirm booking BK-2291 and write to ana.lind@example.com."},
    ]
    litellm.completion(messages=question, temperature=0, **call)
    litellm.completion(messages=question, temperature=0, **call)
    weather = [
        {"role": "system", "content": mock.SYSTEM},
        {"role": "user", "content": "What is the weather in Oslo for my trip?"},
    ]
    first = litellm.completion(messages=weather, tools=[mock.WEATHER_TOOL], tool_choice="auto",
                               max_tokens=200, **call)
    tc = first.choices[0].message.tool_calls[0]
    follow = weather + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": tc.id, "type": "function",
            "function": {"name": tc.function.name, "arguments": tc.function.arguments}}]},
        {"role": "tool", "tool_call_id": tc.id, "content": json.dumps({"temp_c": 4, "sky": "cloudy"})},
    ]
    litellm.completion(messages=follow, **call)
    litellm.embedding(model="openai/text-embedding-3-small", input=["trips to Oslo"],
                      api_base=base, api_key="sk-test-not-a-key")
    stream = litellm.completion(
        messages=[{"role": "user", "content": "Call me back on +46 8 555 012 34, please."}],
        stream=True, **call)
    for _ in stream:
        pass
    # Success callbacks of sync calls run on a worker thread.
    for _ in range(100):
        if len(payloads) >= 6:
            break
        time.sleep(0.1)
    server.shutdown()
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "standard_logging.jsonl", "w") as f:
        for p in payloads:
            f.write(json.dumps(p, separators=(",", ":"), ensure_ascii=False, default=str) + "\n")
    with open(OUT / "requests.jsonl", "w") as f:
        for r in server.requests:
            f.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n")
    print(f"litellm: {len(payloads)} payloads, {len(server.requests)} requests")


def main(argv):
    if argv[1:] == ["--traffic"]:
        return traffic()
    path = CACHE / "litellm-fixtures"
    python = path / "bin" / "python"
    marker = path / ".installed"
    wanted = (HERE / "requirements.txt").read_text()
    if not marker.exists() or marker.read_text() != wanted:
        venv.create(path, with_pip=True, clear=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-r",
                        str(HERE / "requirements.txt")], check=True)
        marker.write_text(wanted)
    # No network: the model cost map shipped with the package, no telemetry.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    subprocess.run([str(python), __file__, "--traffic"], env=env, check=True)


if __name__ == "__main__":
    main(sys.argv)

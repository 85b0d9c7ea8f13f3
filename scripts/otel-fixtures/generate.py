#!/usr/bin/env python3
"""Real OpenTelemetry GenAI telemetry for `conform import otel`'s tests.

Drives the OpenAI Python SDK, instrumented by the official
`opentelemetry-instrumentation-openai-v2`, against a loopback mock of the Chat
Completions and Embeddings APIs, inside a non-GenAI parent span. The SDK's own
OTLP/HTTP exporters send to a loopback receiver (the same server), which turns each
protobuf `ExportTraceServiceRequest` / `ExportLogsServiceRequest` into one line of
OTLP/HTTP JSON (hex ids, integer enums, int64 as strings), as a collector's file
exporter writes them. The mock saves every request body the SDK sent, next to the
telemetry, so that the tests compare the imported suite with what was really sent.

    python3 scripts/otel-fixtures/generate.py            # all placements
    python3 scripts/otel-fixtures/generate.py span event  # some of them

Placements (tests/fixtures/otel/PLACEMENT.otlp.jsonl and PLACEMENT.requests.jsonl):
  span   latest experimental conventions, content on span attributes
  event  latest experimental conventions, content in
         `gen_ai.client.inference.operation.details` log records
  both   both of the above at once
  legacy an older instrumentation release: `gen_ai.*.message` / `gen_ai.choice` logs

The virtual environments live outside the repository (~/.cache/conform/otel-fixtures-*),
built from the pinned requirements files next to this script.
"""

import base64
import json
import os
import subprocess
import sys
import threading
import venv
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
OUT = REPO / "tests" / "fixtures" / "otel"
CACHE = Path(os.environ.get("CONFORM_CACHE", Path.home() / ".cache" / "conform"))

PLACEMENTS = {
    "span": ("requirements.txt", {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
    }),
    "event": ("requirements.txt", {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only",
        "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT": "true",
    }),
    "both": ("requirements.txt", {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_and_event",
        "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT": "true",
    }),
    "legacy": ("requirements-legacy.txt", {
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    }),
}

SYSTEM = "You are the support desk of Lindqvist Travel. Answer in one sentence."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


# --- the mock: Chat Completions, Embeddings, and the OTLP/HTTP receiver -------------

def completion(body):
    """A deterministic answer: a tool call when a tool may answer, else text."""
    messages = body.get("messages", [])
    last = messages[-1] if messages else {}
    if body.get("tools") and last.get("role") == "user":
        return {"content": None, "tool_calls": [{
            "id": "call_weather_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})},
        }]}, "tool_calls"
    if last.get("role") == "tool":
        return {"content": "It is 4 °C and cloudy in Oslo."}, "stop"
    return {"content": "Your booking is confirmed; we will write to you."}, "stop"


class Mock(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body, kind="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        server = self.server
        if self.path == "/v1/traces" or self.path == "/v1/logs":
            server.telemetry.append(otlp_json(self.path, raw))
            return self.reply(200, b"", "application/x-protobuf")
        body = json.loads(raw)
        server.requests.append({"path": self.path, "body": body})
        created = 1764900000 + len(server.requests)
        if self.path == "/v1/embeddings":
            return self.reply(200, {
                "object": "list", "model": body["model"],
                "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
                "usage": {"prompt_tokens": 5, "total_tokens": 5},
            })
        message, finish = completion(body)
        rid = f"chatcmpl-{len(server.requests)}"
        served = body["model"] + "-2026-01-01"
        if body.get("stream"):
            text = message["content"] or ""
            chunks = [text[:10], text[10:]]
            out = b""
            for i, piece in enumerate(chunks):
                delta = {"content": piece} if i else {"role": "assistant", "content": piece}
                chunk = {"id": rid, "object": "chat.completion.chunk", "created": created,
                         "model": served,
                         "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                out += b"data: " + json.dumps(chunk).encode() + b"\n\n"
            last = {"id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": served, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
            out += b"data: " + json.dumps(last).encode() + b"\n\n"
            out += b"data: [DONE]\n\n"
            return self.reply(200, out, "text/event-stream")
        return self.reply(200, {
            "id": rid, "object": "chat.completion", "created": created, "model": served,
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
        })


def otlp_json(path, raw):
    """One export request as the OTLP/HTTP JSON encoding: lowerCamelCase names, enums as
    integers, int64 as strings, trace and span ids as hex (not protobuf JSON's base64)."""
    from google.protobuf import json_format
    if path == "/v1/traces":
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest as Request)
    else:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest as Request)
    message = Request.FromString(raw)
    value = json_format.MessageToDict(message, use_integers_for_enums=True)
    return hex_ids(value)


def hex_ids(value):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                v = base64.b64decode(v).hex()
            out[k] = hex_ids(v)
        return out
    if isinstance(value, list):
        return [hex_ids(v) for v in value]
    return value


def serve():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Mock)
    server.requests = []
    server.telemetry = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --- the traffic, run inside the venv --------------------------------------------

def traffic(placement):
    server = serve()
    base = f"http://127.0.0.1:{server.server_port}"
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry._logs import set_logger_provider
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    resource = Resource.create({"service.name": "travel-desk"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces")))
    trace.set_tracer_provider(tracer_provider)
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{base}/v1/logs")))
    set_logger_provider(logger_provider)
    providers = {"tracer_provider": tracer_provider, "logger_provider": logger_provider}
    try:
        # Older releases emit through the Events API.
        from opentelemetry._events import set_event_logger_provider
        from opentelemetry.sdk._events import EventLoggerProvider
        events = EventLoggerProvider(logger_provider)
        set_event_logger_provider(events)
        providers["event_logger_provider"] = events
    except ImportError:
        pass

    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    OpenAIInstrumentor().instrument(**providers)
    import openai
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test-not-a-key")
    tracer = trace.get_tracer("travel-desk")

    question = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Please confirm booking BK-2291 and write to ana.lind@example.com."},
    ]
    with tracer.start_as_current_span("POST /bookings/confirm"):
        client.chat.completions.create(model="gpt-4o-mini", messages=question, temperature=0)
        # The same request again: one case, its second answer a repeat.
        client.chat.completions.create(model="gpt-4o-mini", messages=question, temperature=0)
    with tracer.start_as_current_span("POST /weather"):
        weather = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is the weather in Oslo for my trip?"},
        ]
        first = client.chat.completions.create(
            model="gpt-4o-mini", messages=weather, tools=[WEATHER_TOOL], tool_choice="auto",
            max_tokens=200)
        call = first.choices[0].message.tool_calls[0]
        follow = weather + [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call.id, "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 4, "sky": "cloudy"})},
        ]
        # The follow-up declares no tools: the telemetry records a call to a tool it never
        # defines, which the importer must declare.
        client.chat.completions.create(model="gpt-4o-mini", messages=follow)
    with tracer.start_as_current_span("POST /search"):
        client.embeddings.create(model="text-embedding-3-small", input="trips to Oslo")
        stream = client.chat.completions.create(
            model="gpt-4o-mini", stream=True,
            messages=[{"role": "user", "content": "Call me back on +46 8 555 012 34, please."}])
        for _ in stream:
            pass

    tracer_provider.force_flush()
    logger_provider.force_flush()
    tracer_provider.shutdown()
    logger_provider.shutdown()
    server.shutdown()
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / f"{placement}.otlp.jsonl", "w") as f:
        for export in server.telemetry:
            f.write(json.dumps(export, separators=(",", ":"), ensure_ascii=False) + "\n")
    with open(OUT / f"{placement}.requests.jsonl", "w") as f:
        for request in server.requests:
            f.write(json.dumps(request, separators=(",", ":"), ensure_ascii=False) + "\n")
    print(f"{placement}: {len(server.telemetry)} exports, {len(server.requests)} requests")


# --- the driver, run by whatever python3 ---------------------------------------

def environment(requirements):
    """A venv per requirements file, outside the repository, built once."""
    stem = requirements.replace(".txt", "")
    path = CACHE / f"otel-fixtures-{stem}"
    python = path / "bin" / "python"
    marker = path / ".installed"
    wanted = (HERE / requirements).read_text()
    if not marker.exists() or marker.read_text() != wanted:
        venv.create(path, with_pip=True, clear=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-r",
                        str(HERE / requirements)], check=True)
        marker.write_text(wanted)
    return python


def main(argv):
    if len(argv) == 3 and argv[1] == "--traffic":
        return traffic(argv[2])
    chosen = argv[1:] or list(PLACEMENTS)
    for placement in chosen:
        requirements, env = PLACEMENTS[placement]
        python = environment(requirements)
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        subprocess.run([str(python), __file__, "--traffic", placement],
                       env={**clean, **env}, check=True)


if __name__ == "__main__":
    main(sys.argv)

//! Gemini's `generateContent` as a server speaks it: what simulated Gemini providers
//! answer, in the recorded payloads' shapes, streams on `:streamGenerateContent`.

use serde_json::{Value, json};

use crate::provider::server::{
    Answer, Asked, Call, Choice, Response, WireServer, first_at, output_tokens, pieces, sse,
};

/// The server side of Gemini's `generateContent`.
pub(crate) struct GenerateServer;

impl WireServer for GenerateServer {
    /// `/v1(beta)?/models/MODEL:(generateContent|streamGenerateContent)`.
    fn on_route(&self, path: &str) -> bool {
        let Some(rest) = path
            .strip_prefix("/v1beta/models/")
            .or_else(|| path.strip_prefix("/v1/models/"))
        else {
            return false;
        };
        match rest.split_once(':') {
            Some((model, method)) => {
                !model.is_empty()
                    && !model.contains('/')
                    && matches!(method, "generateContent" | "streamGenerateContent")
            }
            None => false,
        }
    }

    fn read<'a>(&self, body: &'a Value) -> Asked<'a> {
        let str_at = |pointer: &str| body.pointer(pointer).and_then(Value::as_str);
        let user_texts: Vec<&str> = body
            .get("contents")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| c["role"] == "user")
            .flat_map(|c| c["parts"].as_array().into_iter().flatten())
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        let system = str_at("/systemInstruction/parts/0/text").map_or(0, str::len);
        let choice = match str_at("/toolConfig/functionCallingConfig/mode") {
            Some("NONE") => Choice::None,
            Some("ANY")
                if body
                    .pointer("/toolConfig/functionCallingConfig/allowedFunctionNames")
                    .is_some() =>
            {
                Choice::Named
            }
            Some("ANY") => Choice::Required,
            _ => Choice::Auto,
        };
        Asked {
            prompt_chars: system + user_texts.iter().map(|t| t.len()).sum::<usize>(),
            output_limit: body
                .pointer("/generationConfig/maxOutputTokens")
                .and_then(Value::as_u64),
            tool: str_at("/toolConfig/functionCallingConfig/allowedFunctionNames/0"),
            schema: first_at(
                body,
                &[
                    "/generationConfig/responseJsonSchema",
                    "/generationConfig/responseSchema",
                    "/tools/0/functionDeclarations/0/parametersJsonSchema",
                    "/tools/0/functionDeclarations/0/parameters",
                ],
            ),
            user_texts,
            choice,
        }
    }

    fn wants_stream(&self, path: &str, _body: &Value) -> bool {
        path.ends_with(":streamGenerateContent")
    }

    fn success(&self, a: &Answer<'_>) -> Value {
        let output_tokens = a.content.len().div_ceil(4) as u64;
        let input: Option<Value> = a
            .tool
            .and_then(|_| serde_json::from_str(&a.content).ok())
            .filter(Value::is_object);
        let part = match (&input, a.tool) {
            (Some(args), Some(name)) => json!({"functionCall": {"name": name, "args": args}}),
            _ => json!({"text": a.content}),
        };
        json!({
            "candidates": [{"content": {"parts": [part], "role": "model"},
                "finishReason": if a.cut_off { "MAX_TOKENS" } else { "STOP" }, "index": 0}],
            "usageMetadata": {"promptTokenCount": a.prompt_tokens,
                "candidatesTokenCount": output_tokens,
                "totalTokenCount": a.prompt_tokens + output_tokens,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": a.prompt_tokens}]},
            "modelVersion": a.model,
            "responseId": format!("sim{:020}", a.n),
        })
    }

    fn success_with_calls(&self, a: &Answer<'_>, calls: &[Call<'_>], _named: bool) -> Value {
        let output_tokens = output_tokens(&a.content, calls);
        let mut parts = Vec::new();
        if !a.content.is_empty() {
            parts.push(json!({"text": a.content}));
        }
        for c in calls {
            parts.push(json!({"functionCall": {"name": c.name, "args": c.object()}}));
        }
        json!({
            "candidates": [{"content": {"parts": parts, "role": "model"},
                "finishReason": if a.cut_off { "MAX_TOKENS" } else { "STOP" }, "index": 0}],
            "usageMetadata": {"promptTokenCount": a.prompt_tokens,
                "candidatesTokenCount": output_tokens,
                "totalTokenCount": a.prompt_tokens + output_tokens},
            "modelVersion": a.model,
            "responseId": format!("sim{:020}", a.n),
        })
    }

    fn stream(&self, a: &Answer<'_>) -> (&'static str, String) {
        let whole = self.success(a);
        let candidate = &whole["candidates"][0];
        let call = candidate["content"]["parts"][0]
            .get("functionCall")
            .is_some();
        // A call arrives whole in one chunk; text in pieces.
        let texts: Vec<Value> = if call {
            vec![candidate["content"]["parts"][0].clone()]
        } else {
            pieces(&a.content)
                .iter()
                .map(|p| json!({"text": p}))
                .collect()
        };
        let n = texts.len();
        let mut events = Vec::new();
        for (i, part) in texts.into_iter().enumerate() {
            let mut chunk = json!({"candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}],
                "usageMetadata": {"promptTokenCount": a.prompt_tokens, "totalTokenCount": a.prompt_tokens},
                "modelVersion": a.model, "responseId": whole["responseId"]});
            if i + 1 == n {
                chunk["candidates"][0]["finishReason"] = candidate["finishReason"].clone();
                chunk["usageMetadata"] = whole["usageMetadata"].clone();
            }
            events.push(chunk);
        }
        ("text/event-stream", sse(&events))
    }

    fn rate_limited(&self) -> Response {
        Response::json(
            429,
            &json!({"error": {"code": 429,
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "status": "RESOURCE_EXHAUSTED", "details": [
                    {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                        {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                         "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]}}),
        )
    }

    fn error(&self, status: u16, message: &str) -> Response {
        Response::json(
            status,
            &json!({"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}),
        )
    }

    /// As recorded on Vertex: an error chunk after part of the answer.
    fn stream_failure(&self) -> String {
        sse(&[
            json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
            "status": "UNAVAILABLE"}}),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes the wiremock matchers of the simulations used to match, as regular
    /// expressions, now matched without one.
    #[test]
    fn it_answers_on_the_model_methods_only() {
        let routes = [
            ("/v1beta/models/gemini-2.5-flash:generateContent", true),
            ("/v1/models/gemini-2.5-flash:streamGenerateContent", true),
            ("/v1beta/models/:generateContent", false),
            ("/v1beta/models/a/b:generateContent", false),
            ("/v1beta/models/m:countTokens", false),
            ("/v1beta/models/m", false),
            ("/v2/models/m:generateContent", false),
        ];
        for (path, answered) in routes {
            assert_eq!(GenerateServer.on_route(path), answered, "{path}");
        }
        // Its rate limit says when to retry in the body (RetryInfo), not in a header.
        assert!(GenerateServer.rate_limited().headers.is_empty());
    }
}

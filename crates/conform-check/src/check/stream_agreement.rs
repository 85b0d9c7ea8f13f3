//! A streamed answer is the answer: with a suite's `stream_agreement = true` and a
//! provider that streams, each case is also sent unstreamed, and the folded stream must
//! say the same thing (canonical JSON, so key order and spacing do not count), tool
//! calls included (each call's name and parsed arguments).

use super::{Code, Finding, Outcome};
use crate::check::record::{MAX_OUTPUT, reply_digest, truncate};
use conform_wire::provider::{CallError, Reply};

/// The check's name in outcomes and reports.
pub const NAME: &str = "stream_agreement";

/// How the streamed and the unstreamed answer to one case compare. A streamed call that
/// failed has its own failure: nothing is compared (a skip, which is not a pass).
pub fn outcome(streamed: Result<&Reply, &CallError>, plain: Result<&Reply, &CallError>) -> Outcome {
    let Ok(streamed) = streamed else {
        return Outcome::skip(NAME);
    };
    let finding = match plain {
        Err(error) => Finding::new(
            Code::UnstreamedCallFailed,
            format!("the same case unstreamed, to compare with, failed: {error}"),
        ),
        Ok(plain)
            if reply_digest(&plain.text, &plain.tool_calls)
                == reply_digest(&streamed.text, &streamed.tool_calls) =>
        {
            return Outcome::from_findings(NAME, Vec::new());
        }
        Ok(plain) => Finding::new(
            Code::StreamDisagreement,
            format!(
                "the streamed answer differs from the unstreamed one: streamed `{}`, unstreamed `{}`",
                truncate(&streamed.text, MAX_OUTPUT / 8),
                truncate(&plain.text, MAX_OUTPUT / 8)
            ),
        ),
    };
    Outcome::from_findings(NAME, vec![finding])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;
    use conform_wire::provider::{ErrorKind, Finish, FinishKind, Usage};

    fn reply(text: &str) -> Reply {
        Reply {
            text: text.into(),
            finish: Finish::new(FinishKind::Stop, Some("stop")),
            refusal: None,
            usage: Usage::default(),
            served_model: None,
            system_fingerprint: None,
            tool_calls: Vec::new(),
        }
    }

    #[test]
    fn the_same_json_agrees_whatever_its_spacing_and_order() {
        let a = reply(r#"{"a": 1, "b": [2]}"#);
        let b = reply(r#"{"b":[2],"a":1}"#);
        assert_eq!(outcome(Ok(&a), Ok(&b)).status, Status::Pass);
        let c = reply(r#"{"a": 2, "b": [2]}"#);
        let o = outcome(Ok(&a), Ok(&c));
        assert_eq!(o.findings[0].code, "stream_disagreement");
        let failed = CallError::new(ErrorKind::ServerError, "boom");
        assert_eq!(
            outcome(Ok(&a), Err(&failed)).findings[0].code,
            "unstreamed_call_failed"
        );
        assert_eq!(outcome(Err(&failed), Ok(&a)).status, Status::Skip);
    }
}

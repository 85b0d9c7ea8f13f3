//! Counting a call's prompt tokens at the provider's own endpoint, as each vendor offers
//! it (`WireFormat::count_request`, `count_answer`): pure requests and answers, sent by
//! `crate::tokenize::provider`. Each body is made from the request the call sends, so what
//! is counted is what is sent.

use reqwest::header::HeaderMap;
use serde_json::{Map, Value};

/// How many prompt tokens a call was counted at; `exact` is false when the count is a
/// lower bound (the count endpoint could not take part of the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    /// The prompt's tokens.
    pub tokens: u64,
    /// False when the count is a lower bound.
    pub exact: bool,
}

/// One request to a count endpoint.
#[derive(Debug, Clone)]
pub struct CountRequest {
    /// Where the request goes.
    pub url: String,
    /// Headers, authentication included.
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Value,
}

/// What a count endpoint's answer says: the count, or the request that comes next.
#[derive(Debug, Clone)]
pub enum Counted {
    /// The count is in this answer.
    Tokens(Count),
    /// The count takes another request, built from this answer (a template applied, then its text tokenized).
    Then(CountRequest),
}

/// The members of `sent` (the request a call sends) named by `keys`, as an object.
pub(crate) fn keep(sent: &Value, keys: &[&str]) -> Map<String, Value> {
    let sent = sent.as_object();
    keys.iter()
        .filter_map(|k| sent?.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect()
}

/// Why a count endpoint's answer gave no count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CountError {
    /// The wire format has no endpoint that counts tokens.
    #[error("this wire has no count endpoint")]
    NoEndpoint,
    /// The answer lacks the integer member it names.
    #[error("the count has no integer `{0}`")]
    NoInteger(&'static str),
    /// `endpoint` answered without the member `field` the next step needs.
    #[error("{endpoint} returned no `{field}`")]
    Missing {
        /// The endpoint that answered.
        endpoint: &'static str,
        /// The member it left out.
        field: &'static str,
    },
}

/// The integer `field` of a count's answer.
pub(crate) fn integer(answer: &Value, field: &'static str) -> Result<u64, CountError> {
    answer
        .get(field)
        .and_then(Value::as_u64)
        .ok_or(CountError::NoInteger(field))
}

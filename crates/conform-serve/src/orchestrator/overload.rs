//! The overload seam: the answer a request gets when every in-flight slot is taken.
//! [`ProblemOverload`] is the real one, the contract's 503 `overloaded` problem with its
//! `Retry-After`, which is what lets a client tell shedding from a failure.

use axum::response::{IntoResponse, Response};

use super::problem::Problem;

/// Answers a request shed by the in-flight limit.
pub trait Overload: Send + Sync + 'static {
    /// The response, built afresh for each request shed.
    fn answer(&self) -> Response;
}

/// 503 `overloaded`, as the contract shapes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProblemOverload;

impl Overload for ProblemOverload {
    fn answer(&self) -> Response {
        Problem::overloaded(
            "too many requests are being handled; retry after the Retry-After delay",
        )
        .into_response()
    }
}

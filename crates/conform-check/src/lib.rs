//! Every answer's checks and every pair's verdict: [`check`] holds the `Check` trait and
//! one file per check (JSON, schema, agree, rules, tool calls, tokens, stability, the
//! comparison with a reference); [`verdict`] tallies a (suite, provider)'s records and
//! turns them into a verdict with typed reasons; [`latency`] keeps bounded histograms.

#![deny(missing_docs)]
#![deny(unreachable_pub)]

pub mod check;
pub mod latency;
pub mod verdict;

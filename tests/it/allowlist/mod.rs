//! The allowlist as a contract: the reader's denials, its behaviour on any bytes, the
//! published schema, the writer under crashes and concurrency, and the CLI around it.

use crate::common;

mod cli;
mod concurrent;
mod corrupt;
mod crash;
mod fuzz;
mod guard;
mod lifecycle;
mod reader;
mod schema;
mod support;

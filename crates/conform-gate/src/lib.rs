//! The failover decision held to a project: the project's files as they are now, the
//! state a reader keeps, what `gate`, `allowlist show` and `explain` answer, the file's
//! locked, atomic writer, and the gateway configs that list only permitted fallbacks.
//! Every answer comes from the reader crate's one decision, `conform_allowlist`'s
//! `Allowlist::decide_with`, through [`allowlist::decide`].

#![deny(missing_docs)]
#![deny(unreachable_pub)]

pub mod allowlist;
pub mod export;

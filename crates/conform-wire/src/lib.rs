//! The wires conform speaks: one adapter per vendor behind [`provider::WireFormat`],
//! the shared [`provider::Transport`] that sends, paces, retries and classifies, the
//! tokenizers that count prompts as each provider counts them ([`tokenize`]), the schema
//! keyword probe ([`probe`]) and the simulated providers on loopback ([`sim`]).
//!
//! Every vendor's wire words (event names, error types, finish reasons) live in its own
//! folder under [`provider`], and nowhere else in the workspace.

#![deny(missing_docs)]
#![deny(unreachable_pub)]

pub mod probe;
pub mod provider;
pub mod sim;
pub mod tokenize;

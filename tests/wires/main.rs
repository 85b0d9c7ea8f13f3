//! Every vendor's wire against its recorded payloads, faults, streams, simulations and token counts.
//!
//! One binary for many test modules: each links the workspace once, not once a file.

#[path = "../clouds/mod.rs"]
mod clouds;
#[path = "../common/mod.rs"]
mod common;

mod anthropic_wire;
mod azure_wire;
mod bedrock_wire;
mod fault_matrix;
mod gemini_wire;
mod ollama_wire;
mod sim_wires;
mod streams;
mod tokens;
mod tool_tokens;
mod tool_wire;
mod vertex_wire;
mod wire_openai;

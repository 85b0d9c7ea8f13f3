//! Reports out: `results.jsonl` (streamed during the run), `report.json` (written at
//! the end by streaming the results back, so memory stays flat), and the terminal
//! summary with a progress display.

pub mod json;
pub mod jsonl;
pub mod progress;
pub mod terminal;
